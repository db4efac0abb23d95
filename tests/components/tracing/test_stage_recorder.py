"""StageRecorderTracer: per-component stages of a real Haystack pipeline run, per context, errors kept."""

import threading

import pytest
from haystack import Pipeline, component, tracing

from components.tracing import stage_recorder


@component
class Doubler:
    @component.output_types(value=int)
    def run(self, value: int):
        if value < 0:
            raise ValueError("negative input")
        return {"value": value * 2}


def two_stage_pipeline() -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("first", Doubler())
    pipeline.add_component("second", Doubler())
    pipeline.connect("first.value", "second.value")
    return pipeline


@pytest.fixture(scope="module", autouse=True)
def recorder_installed():
    # As a LookupService with MLflow configured does; it only records, and stays for the process.
    stage_recorder.install()


def test_install_is_idempotent():
    tracer = tracing.tracer.actual_tracer
    stage_recorder.install()
    assert tracing.tracer.actual_tracer is tracer
    assert isinstance(tracer, stage_recorder.StageRecorderTracer)


def test_a_run_records_each_component_in_order_with_times():
    stage_recorder.clear_last_recording()
    assert two_stage_pipeline().run({"first": {"value": 3}})["second"]["value"] == 12
    recording = stage_recorder.last_recording()
    assert [stage.name for stage in recording.stages] == ["first", "second"]
    for stage in recording.stages:
        assert recording.start_ns <= stage.start_ns <= stage.end_ns <= recording.end_ns
        assert stage.error is None
    assert stage_recorder.current_recording() is None  # only set while the pipeline runs


def test_a_failing_component_keeps_its_error_and_the_stages_before_it():
    stage_recorder.clear_last_recording()
    with pytest.raises(Exception, match="negative input"):
        two_stage_pipeline().run({"first": {"value": -1}})
    recording = stage_recorder.last_recording()
    assert [stage.name for stage in recording.stages] == ["first"]
    assert "negative input" in recording.stages[0].error


def test_each_thread_records_its_own_run():
    seen = {}

    def run(value: int) -> None:
        two_stage_pipeline().run({"first": {"value": value}})
        seen[value] = stage_recorder.last_recording()

    threads = [threading.Thread(target=run, args=(value,)) for value in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen[1] is not seen[2] and all(len(recording.stages) == 2 for recording in seen.values())


def test_until_failed_ends_a_recording_at_a_stage_that_returned_its_failure():
    stage_recorder.clear_last_recording()
    two_stage_pipeline().run({"first": {"value": 3}})
    recording = stage_recorder.last_recording()
    cut = stage_recorder.until_failed(recording, "first", ConnectionError("store went away"))
    assert [stage.name for stage in cut.stages] == ["first"]
    assert cut.stages[0].error == "ConnectionError: store went away" and cut.stages[0].outputs is None
    assert cut.end_ns == cut.stages[0].end_ns
    assert [stage.error for stage in recording.stages] == [None, None]  # the recording itself is kept


def test_until_failed_leaves_a_recording_whose_stage_raised_as_it_is():
    stage_recorder.clear_last_recording()
    with pytest.raises(Exception, match="negative input"):
        two_stage_pipeline().run({"first": {"value": -1}})
    recording = stage_recorder.last_recording()
    assert stage_recorder.until_failed(recording, "first", ValueError("negative input")) is recording
    assert stage_recorder.until_failed(recording, None, ValueError("outside")) is recording
    assert stage_recorder.until_failed(None, "first", ValueError("no recording")) is None
