"""The weight mapping: a transformers GPT-2 and ANDREA compute the same logits; the round trip is exact."""

from __future__ import annotations

import json

import pytest
import torch
from gpt2_testing import TINY_GPT2, random_gpt2
from safetensors.torch import load_file, save_file

from andrea_lab.errors import MissingFileError
from andrea_lab.fit.module import AndreaLM
from andrea_lab.interop.gpt2_config import NotImportableError
from andrea_lab.interop.gpt2_weights import from_hf, read_directory_weights, to_hf
from andrea_lab.model.config import preset

TINY_ANDREA = preset("andrea-micro", vocab_size=257, block_size=32, d_model=32, n_layer=2, n_head=4)


def shapes(module: AndreaLM) -> dict[str, torch.Size]:
    return {key: value.shape for key, value in module.state_dict().items()}


def test_gpt2_weights_in_andrea_give_the_same_logits():
    gpt2 = random_gpt2()
    module = AndreaLM(config=TINY_ANDREA)
    module.load_state_dict(from_hf(gpt2.state_dict(), shapes(module), "tiny"))
    ids = torch.randint(0, 257, (4, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, _ = module.model.eval()(ids)
        theirs = gpt2(ids).logits
    assert (ours - theirs).abs().max() <= 1e-5
    assert (ours - theirs).abs().max() < 1e-3 * theirs.abs().max()  # the logits are not all tiny


def test_andrea_to_gpt2_to_andrea_is_exact():
    torch.manual_seed(2)
    module = AndreaLM(config=TINY_ANDREA)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()
    original = module.state_dict()
    back = from_hf(to_hf(original, TINY_ANDREA.n_layer), shapes(module), "round trip")
    assert back.keys() == original.keys()
    assert all(torch.equal(back[key], original[key]) for key in original)


def test_older_files_without_prefix_with_mask_buffers_and_a_stored_head_import(tmp_path):
    """The public ``gpt2`` files: keys without ``transformer.``, causal-mask buffers, lm_head stored."""
    gpt2 = random_gpt2()
    state = {key.removeprefix("transformer."): value.clone() for key, value in gpt2.state_dict().items()}
    state["lm_head.weight"] = state.pop("lm_head.weight", state["wte.weight"]).clone()
    for i in range(TINY_GPT2["n_layer"]):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 32, 32))
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, tmp_path / "pytorch_model.bin")
    module = AndreaLM(config=TINY_ANDREA)
    module.load_state_dict(from_hf(read_directory_weights(tmp_path), shapes(module), str(tmp_path)))
    assert torch.equal(module.model.blocks[1].mlp.sublayer.fc.weight, gpt2.transformer.h[1].mlp.c_fc.weight.t())


def test_sharded_safetensors_are_read_through_their_index(tmp_path):
    random_gpt2().save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    weights = read_directory_weights(tmp_path)
    assert "transformer.h.1.mlp.c_proj.weight" in weights and "transformer.wte.weight" in weights


def test_a_shard_index_pointing_outside_the_directory_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"wte.weight": "../x.safetensors"}})
    )
    with pytest.raises(Exception, match="names shard files outside its directory"):
        read_directory_weights(tmp_path)


def test_missing_misshapen_unexpected_and_untied_weights_are_named(tmp_path):
    module = AndreaLM(config=TINY_ANDREA)
    state = dict(random_gpt2().state_dict())
    del state["transformer.h.0.ln_1.bias"]
    state["transformer.h.1.attn.c_attn.weight"] = torch.zeros(32, 64)
    state["transformer.h.0.crossattention.q_attn.weight"] = torch.zeros(32, 32)
    with pytest.raises(NotImportableError) as caught:
        from_hf(state, shapes(module), "tiny")
    message = str(caught.value)
    assert "tiny does not hold the GPT-2 its config.json describes" in message
    assert "missing: h.0.ln_1.bias" in message and "unexpected: h.0.crossattention.q_attn.weight" in message
    assert "h.1.attn.c_attn.weight (32, 64) (config.json implies (32, 96))" in message
    untied = dict(random_gpt2().state_dict())
    untied["lm_head.weight"] = torch.zeros(257, 32)
    with pytest.raises(NotImportableError, match="lm_head.weight differs from the token embedding"):
        from_hf(untied, shapes(module), "tiny")


def test_a_directory_without_weights_says_what_it_looked_for(tmp_path):
    with pytest.raises(MissingFileError, match="holds no weights: expected one of model.safetensors"):
        read_directory_weights(tmp_path)


def test_safetensors_written_by_transformers_load_through_the_safe_loader(tmp_path):
    random_gpt2().save_pretrained(tmp_path)
    assert read_directory_weights(tmp_path).keys() == load_file(tmp_path / "model.safetensors").keys()
    save_file({"x": torch.zeros(1)}, tmp_path / "other.safetensors")  # not a name transformers writes: ignored
    assert "x" not in read_directory_weights(tmp_path)
