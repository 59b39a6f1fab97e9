"""The default thread count of math libraries: usable CPUs from affinity and cgroup quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.runtimes.cpus import compute_threads, usable_cpus


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "usable", "threads"),
    [
        (None, 2, 2, 1),  # no cgroup file: affinity decides; one core is the event loop's
        ("max 100000\n", 8, 8, 7),  # no quota
        ("200000 100000\n", 64, 2, 1),  # a 2-CPU limit on a 64-core node
        ("150000 100000\n", 64, 2, 1),  # 1.5 CPUs round up
        ("50000 100000\n", 64, 1, 1),  # below one CPU: still one thread
        ("400000 100000\n", 2, 2, 1),  # the quota exceeds the affinity mask
        ("garbage\n", 4, 4, 3),  # unreadable content is no quota
        ("0 100000\n", 4, 4, 3),
        (None, 1, 1, 1),
    ],
)
def test_usable_cpus_and_threads(
    tmp_path: Path, cpu_max: str | None, affinity: int, usable: int, threads: int
) -> None:
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    assert usable_cpus(path, affinity) == usable
    assert compute_threads(path, affinity) == threads


def test_this_process() -> None:
    assert compute_threads() >= 1
    assert usable_cpus() >= compute_threads()


def test_sklearn_load_caps_the_blas_pool(tmp_path: Path) -> None:
    """A loaded scikit-learn model leaves numpy's BLAS at `blas_threads` (default: the
    usable CPUs less one); the original limits come back after the test."""
    import shutil

    import yaml
    from threadpoolctl import threadpool_info, threadpool_limits

    from tests.runtimes.runtime_helpers import EXAMPLES, load_dir

    if not any(pool["user_api"] == "blas" for pool in threadpool_info()):
        pytest.fail("numpy is expected to link a BLAS that threadpoolctl can see")
    with threadpool_limits(limits=None):  # restores the process's limits on exit
        for threads, expected in ((3, 3), (None, compute_threads())):
            directory = tmp_path / f"iris-{threads}"
            shutil.copytree(EXAMPLES / "iris", directory)
            config_path = directory / "model.yaml"
            config = yaml.safe_load(config_path.read_text())
            params = config.setdefault("parameters", {})
            params.pop("blas_threads", None)
            if threads is not None:
                params["blas_threads"] = threads
            config_path.write_text(yaml.safe_dump(config))
            load_dir(directory)
            blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
            assert set(blas) == {expected}
