"""explain --scan: one Mamba-2 scan walked through the executor's recurrence and chunked form,
equal to the recurrence worked out by hand (A = −ln 2, so every decay is a power of ½)."""

from __future__ import annotations

import numpy as np

# by hand: S_t = e^{Δ_t·A}·S_{t−1} + Δ_t·x_t·B_tᵀ, y_t = S_t·C_t + D·x_t, D = ½,
# x = B = ((1,0), (0,1), (1,1)), C = ((1,1), (1,0), (0,1)), Δ = (1, 1, 2): decays ½, ½, ¼
HAND = {
    "update_1": [[1, 0], [0, 0]],  # 1·(1,0)ᵀ(1,0)
    "S_1": [[1, 0], [0, 0]],
    "y_1": [[1.5], [0]],  # S_1·(1,1) = (1,0); + ½·(1,0)
    "S_2": [[0.5, 0], [0, 1]],  # ½·S_1 + 1·(0,1)ᵀ(0,1)
    "y_2": [[0.5], [0.5]],  # S_2·(1,0) = (½,0); + ½·(0,1)
    "update_3": [[2, 2], [2, 2]],  # 2·(1,1)ᵀ(1,1)
    "S_3": [[2.125, 2], [2, 2.25]],  # ¼·S_2 + update_3
    "y_3": [[2.5], [2.75]],  # S_3·(0,1) = (2, 2.25); + ½·(1,1)
    "Y": [[1.5, 0], [0.5, 0.5], [2.5, 2.75]],
    # chunk 1 (tokens 1–2): G = C·Bᵀ, L = ((1,0),(½,1)), M = G ⊙ L
    "G_1": [[1, 1], [1, 0]],
    "decay_1": [[1, 0], [0.5, 1]],
    "M_1": [[1, 0], [0.5, 0]],
    # chunk 2 (token 3, then padding): the state carried in is S_2, read by C_3 = (0,1), ×¼
    "state_in_2": [[0.5, 0], [0, 1]],
    "Y_off_2": [[0, 0.25], [0, 0]],
}


def test_scan_walk_equals_the_hand_calculation(cli):
    r = cli("explain", "--scan", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    for key, want in HAND.items():
        np.testing.assert_allclose(doc[key], want, atol=1e-12, err_msg=key)
    # the chunked form gives the recurrence's outputs and final state
    np.testing.assert_allclose(doc["Y_chunked"], doc["Y"], atol=1e-12)
    np.testing.assert_allclose(doc["S_final"], doc["S_3"], atol=1e-12)
    assert doc["rules"]["y_3"].startswith("[2,2] × [2,1] = [2,1]")
    assert doc["rules"]["update_1"].startswith("[2,1] × [1,2] = [2,2]")
    assert doc["shapes"]["G_2"] == [2, 2]


def test_scan_table_and_refusal(cli):
    r = cli("explain", "--scan")
    assert r.code == 0
    for text in ("S_3 = e^(Δ_3·A)·S_2", "0.25", "2.125", "G = C·Bᵀ", "padding"):
        assert text in r.out, text
    r = cli("explain", "--scan", "--preset", "gpt2")
    assert r.code == 2 and r.err.strip().startswith("error: scan:")
    assert len(r.err.strip().splitlines()) == 1
