"""MlflowTraceSink without a lookup: the reachability probe, one sink per URI, and the disabled state."""

import socket

from components.tracing.mlflow_sink import MlflowTraceSink, _probe, get_sink


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # free again once closed: nothing listens there


def test_the_probe_names_an_unreachable_server_and_passes_a_file_store(tmp_path):
    port = closed_port()
    assert f"cannot connect to 127.0.0.1:{port}" in _probe(f"http://127.0.0.1:{port}")
    assert _probe(f"sqlite:///{tmp_path}/mlflow.db") is None  # a file store: nothing to connect to


def test_one_sink_per_tracking_uri_and_experiment():
    first = get_sink("http://127.0.0.1:1/a", "exp")
    assert get_sink("http://127.0.0.1:1/a", "exp") is first
    assert get_sink("http://127.0.0.1:1/a", "other") is not first


def test_an_unreachable_server_disables_the_sink_and_drops_traces_without_raising():
    sink = MlflowTraceSink(f"http://127.0.0.1:{closed_port()}", "exp")
    sink.start()
    sink.start()  # idempotent
    assert sink.flush(timeout=30.0)
    assert sink.state == "disabled" and "cannot connect" in sink.reason
    assert sink.submit(job=None) is False  # dropped before it is even looked at


def test_release_all_frees_the_process_to_trace_to_another_store(mlflow_store, tmp_path):
    from components.tracing.mlflow_sink import release_all

    release_all()  # whatever an earlier test of this process traced to
    first = get_sink(mlflow_store, "release-first")
    first.start()
    assert first.flush(timeout=60.0) and first.state == "ready"
    other = f"sqlite:///{tmp_path}/other.db"
    refused = get_sink(other, "release-other")
    refused.start()
    assert refused.flush(timeout=60.0) and refused.state == "disabled" and "already traces to" in refused.reason
    try:
        assert release_all()
        again = get_sink(other, "release-other")
        assert again is not refused
        again.start()
        assert again.flush(timeout=60.0) and again.state == "ready", again.reason
    finally:
        release_all()  # the tests after this one start from a free process
