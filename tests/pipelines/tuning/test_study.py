"""Which study `open_study` opens, and the one-line refusals: on a real Optuna SQLite storage."""

import pytest

from pipelines.config.settings import ConfigError
from pipelines.tuning.guards import Constraint
from pipelines.tuning.space import SearchSpace
from pipelines.tuning.study import open_study

SPACE = SearchSpace("thresholds", "hit@1", "maximize", {"retrieval.evidence_threshold": {"choices": [0.1, 0.5]}})
GUARDS = [Constraint.parse("no_evidence_rate>=0.9")]


@pytest.fixture
def storage(tmp_path):
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_resume_refuses_a_storage_without_a_study_of_the_space(storage):
    with pytest.raises(ConfigError, match="--resume: no study of search=thresholds in .*start one without --resume"):
        open_study(storage, SPACE, None, resume=True, seed=0, constraints=GUARDS)


def test_a_new_study_gets_a_name_and_resume_opens_the_latest_of_the_space(storage):
    first = open_study(storage, SPACE, None, resume=False, seed=0, constraints=GUARDS)
    assert first.study_name.startswith("thresholds-") and first.user_attrs["space"] == "thresholds"
    resumed = open_study(storage, SPACE, None, resume=True, seed=0, constraints=GUARDS)
    assert resumed.study_name == first.study_name


def test_a_named_study_is_never_reopened_without_resume_nor_resumed_when_absent(storage):
    open_study(storage, SPACE, "s1", resume=False, seed=0, constraints=GUARDS)
    with pytest.raises(ConfigError, match="study 's1' exists in .*--resume continues it"):
        open_study(storage, SPACE, "s1", resume=False, seed=0, constraints=GUARDS)
    with pytest.raises(ConfigError, match="--resume: no study 'nope' in .*known: s1$"):
        open_study(storage, SPACE, "nope", resume=True, seed=0, constraints=GUARDS)
    assert open_study(storage, SPACE, "s1", resume=True, seed=0, constraints=GUARDS).study_name == "s1"
