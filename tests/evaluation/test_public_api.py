"""The public surface of podserve.evaluation is what we mean it to be."""

from __future__ import annotations

import podserve.evaluation as evaluation


def test_all_is_sorted_and_complete() -> None:
    assert evaluation.__all__ == sorted(evaluation.__all__)
    for name in evaluation.__all__:
        assert getattr(evaluation, name) is not None
    assert {"parse_suite", "run_suite", "compare", "push", "write_textfile"} <= set(
        evaluation.__all__
    )


def test_importing_the_package_loads_no_server_code() -> None:
    import subprocess
    import sys

    code = (
        "import sys, podserve.evaluation; "
        "bad = [m for m in sys.modules if m.startswith(('podserve.server', 'podserve.engine', "
        "'podserve.runtimes', 'podserve.kube', 'podserve.bench'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
