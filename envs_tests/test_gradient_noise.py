"""`benchmarks/gradient_noise.py`: its estimators recover a known signal share and rank step directions on
synthetic gradients, and on a real trainer (the smoke preset) the stand-in optimizer records one gradient per
trained step, moves no weight, and finds the common direction of the smoke preset's guided samples."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

spec = importlib.util.spec_from_file_location(
    "gradient_noise", Path(__file__).parent.parent / "benchmarks" / "gradient_noise.py")
gradient_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gradient_noise)


def _gradients(share: float, k: int = 40, dim: int = 20_000, seed: int = 0, sparse_signal: bool = False):
    """K gradients s + n_k with E|n|^2 / |s|^2 = (1 - share) / share."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.zeros(dim, dtype=torch.float64)
    if sparse_signal:
        s[:50] = torch.randn(50, generator=gen, dtype=torch.float64)
    else:
        s = torch.randn(dim, generator=gen, dtype=torch.float64)
    s = s / s.norm()
    noise_sd = ((1 - share) / share / dim) ** 0.5 if share > 0 else 1 / dim ** 0.5
    noise = torch.randn(k, dim, generator=gen, dtype=torch.float64) * noise_sd
    return (s if share > 0 else torch.zeros_like(s)) + noise


@pytest.mark.parametrize("share", [0.05, 0.3, 0.8])
def test_signal_share_recovers_the_share_it_was_built_with(share):
    est = gradient_noise.signal_share(_gradients(share))
    assert abs(est["share"] - share) < max(3 * est["share_se"], 0.02), est
    assert est["share_se"] < 0.1


def test_pure_noise_has_no_signal_and_no_direction():
    g = _gradients(0.0)
    est = gradient_noise.signal_share(g)
    assert abs(est["share"]) < 3 * est["share_se"] + 1e-3, est
    for d in gradient_noise.direction_gains(g).values():
        assert abs(d["gain_per_unit_step"]) < 3 * d["se"] + 1e-6, d


def test_a_sparse_signal_in_noise_favours_the_gradient_over_its_sign():
    """Where the signal lives in 50 of 20,000 coordinates, the sign step spends its length on noise."""
    d = gradient_noise.direction_gains(_gradients(0.3, sparse_signal=True))
    assert d["sgd"]["gain_per_unit_step"] > 5 * d["sign"]["gain_per_unit_step"] > 0, d


def test_cosines_split_by_shared_task():
    g = torch.eye(3, dtype=torch.float64) + 1.0
    c = gradient_noise.pairwise_cosines(g, [{"a"}, {"a", "b"}, {"c"}])
    assert len(c["shared_task"]) == 1 and len(c["disjoint"]) == 2
    assert c["shared_task"][0] == pytest.approx(float(g[0] @ g[1] / (g[0].norm() * g[1].norm())))


def test_smoke_trainer_records_gradients_and_moves_nothing(tmp_path, monkeypatch):
    recorded = {}
    real = gradient_noise.LeapTrainer

    def trainer(config, **kwargs):
        t = real(config, **kwargs)
        recorded["trainer"] = t
        recorded["start"] = {k: v.clone() for k, v in t.model.state_dict().items()}
        return t

    monkeypatch.setattr(gradient_noise, "LeapTrainer", trainer)
    out = tmp_path / "noise.json"
    gradient_noise.main(["--preset", "smoke", "--arm", "multi_turn", "--steps", "4", "--set", "rollout.progress_bar=false",
                         "--runs-dir", str(tmp_path / "run"), "--out", str(out)])
    result = json.loads(out.read_text())
    trained = [s for s in result["steps"] if s["trained"]]
    assert result["gradients"] == len(trained) == len(recorded["trainer"].optimizer.gradients)
    assert all(s["tasks"] for s in result["steps"])
    end = recorded["trainer"].model.state_dict()
    assert all(torch.equal(recorded["start"][k], end[k]) for k in end), "a weight moved"
    # the smoke preset's guided samples (reference answers) pull every step's gradient the same way
    assert len(trained) == 4 and result["share"] > 0.3 and result["cosine"]["all_pairs_mean"] > 0.3, result
