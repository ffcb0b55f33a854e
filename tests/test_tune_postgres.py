"""The PostgreSQL storage, against a real server on loopback (`scripts/ensure-postgres.sh`, run by `.ci/run`)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import ROOT, simlab
from tests.test_tune import SMALL

URL = os.environ.get("SIMLAB_TEST_POSTGRES", "postgresql://simlab:simlab@127.0.0.1:5432/simlab")


@pytest.fixture(scope="module")
def storage():
    from simlab.errors import InputError
    from simlab.tuning.study import open_storage

    try:
        return open_storage(URL)
    except InputError as exc:
        if os.environ.get("CI") or os.environ.get("SIMLAB_TEST_POSTGRES"):
            pytest.fail(f"PostgreSQL is required here and unreachable: {exc}")
        pytest.skip(f"no PostgreSQL server ({exc}); run scripts/ensure-postgres.sh")


@pytest.fixture()
def scenario(tmp_path):
    path = tmp_path / "tune-small.toml"
    path.write_text(SMALL)
    return path


def _trials(storage, name):
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def test_two_workers_record_every_trial_once(storage, scenario, tmp_path):
    name = f"pg-workers-{uuid.uuid4().hex[:8]}"
    simlab("tune", scenario, "--storage", URL, "--study", name, "--workers", "2", "--trials", "8",
           "--out", tmp_path / "out", "--quiet")
    trials = _trials(storage, name)
    assert len(trials) == 8
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.user_attrs["slot"] for t in trials) == list(range(8))
    # and the same study, continued, only grows
    simlab("tune", scenario, "--storage", URL, "--study", name, "--workers", "2", "--trials", "10",
           "--out", tmp_path / "out", "--quiet")
    assert sorted(t.user_attrs["slot"] for t in _trials(storage, name)) == list(range(10))
    optuna.delete_study(study_name=name, storage=storage)


def test_joined_workers_share_one_study(storage, scenario, tmp_path):
    """Two machines' worth of workers (two processes here) join one study by its URL."""
    name = f"pg-join-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "simlab", "tune", str(scenario), "--storage", URL, "--study", name,
           "--join", "--trials", "8", "--quiet"]
    procs = [subprocess.Popen(cmd + ["--out", str(tmp_path / f"w{i}")], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        # joined proposals depend on timing (docs/tuning.md), so the validated pick may or may not be exported
        # (exit 3 says why); what this test asserts is the one shared study below
        assert p.returncode in (0, 3) and "Traceback" not in err, err
        assert p.returncode == 0 or "not exported" in err, err
    trials = _trials(storage, name)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    assert 8 <= len(trials) <= 9  # each worker stops once the study holds 8; both may start the last one
    assert all(t.state == TrialState.COMPLETE and t.values for t in trials)
    optuna.delete_study(study_name=name, storage=storage)
