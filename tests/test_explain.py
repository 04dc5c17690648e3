"""explain: the first seed's §6–§7 (single-head attention by hand, and the causal mask) example
through the executor, to the seed's 3 decimals."""

from __future__ import annotations

import numpy as np

# the seed's printed matrices (§6.1–§7.1: attention by hand, then with the causal mask);
# causal_output is A_causal × V of those
SEED = {
    "Q": [[1, 0], [0, 1], [1, 1]],
    "K": [[1, 0], [1, 1], [2, 1]],
    "V": [[1, 1], [0, 1], [1, 2]],
    "scores": [[1, 1, 2], [0, 1, 1], [1, 2, 3]],
    "scaled": [[0.707, 0.707, 1.414], [0, 0.707, 0.707], [0.707, 1.414, 2.121]],
    "weights": [[0.248, 0.248, 0.503], [0.198, 0.401, 0.401], [0.140, 0.284, 0.576]],
    "output": [[0.752, 1.503], [0.599, 1.401], [0.716, 1.576]],
    "causal_weights": [[1, 0, 0], [0.330, 0.670, 0], [0.140, 0.284, 0.576]],
    "causal_output": [[1, 1], [0.330, 1.0], [0.716, 1.576]],
}


def test_json_matches_the_seed(cli):
    r = cli("explain", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    for key, want in SEED.items():
        got = np.array(doc[key], dtype=float)
        assert got.shape == np.array(want).shape, key
        np.testing.assert_allclose(got, want, atol=6e-4, err_msg=key)  # printed to 3 decimals
    assert doc["shapes"]["scores"] == [3, 3]
    assert doc["rules"]["Q"].startswith("[3,2] × [2,2] = [3,2]")
    assert doc["rules"]["output"].startswith("[3,3] × [3,2] = [3,2]")
    assert doc["causal_scores"][0][1] is None  # −∞ above the diagonal


def test_table_shows_shapes_rules_and_masked_scores(cli):
    r = cli("explain")
    assert r.code == 0
    for text in ("Q = X × WQ", "[3,2] × [2,3] = [3,3]", "0.503", "-∞", "0.670", "1.576"):
        assert text in r.out


def test_own_toy_model(cli, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text('vocab_size = 11\nd_model = 8\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\n'
                   'd_ff = 16\npositions = "rope"\n')
    r = cli("explain", "--config", str(cfg), "--seq", "5", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert np.array(doc["scores"]).shape == (5, 5) and np.array(doc["Q"]).shape == (5, 4)
    w = np.array(doc["causal_weights"])
    np.testing.assert_allclose(w.sum(axis=1), 1)
    assert np.allclose(np.triu(w, 1), 0)
    Q, K = np.array(doc["Q_rope"]), np.array(doc["K_rope"])
    np.testing.assert_allclose(doc["scores"], Q @ K.T, rtol=1e-12, atol=1e-12)


def test_explain_refuses_what_it_cannot_print(cli):
    r = cli("explain", "--preset", "llama2-7b")
    assert r.code == 2 and "toy model" in r.err
