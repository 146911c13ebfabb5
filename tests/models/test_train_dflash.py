"""jobs/train_dflash.py: its training data is the target's own greedy continuations, and a
smoke run writes a checkpoint that speculab's DFlash loader accepts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from speculab.models.dflash import load_dflash
from support.models import REPO

sys.path.insert(0, str(REPO / "jobs"))
import train_dflash

TARGET = REPO / "assets" / "tiny-pycode" / "target"


def test_generated_rows_continue_their_prefix_with_the_targets_argmax() -> None:
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    stream = torch.randint(5, target.config.vocab_size, (400,))
    args = argparse.Namespace(prefix=12, seq_len=31)
    rows = train_dflash.target_generations(target, stream, args, 3, seed=0)  # [3, 32]
    assert rows.shape == (3, 32)
    assert all(any(torch.equal(row[:12], stream[s : s + 12]) for s in range(400 - 12)) for row in rows)
    with torch.no_grad():
        argmax = target(rows).logits.argmax(-1)  # [3, 32]: the token after each position
    assert torch.equal(rows[:, 12:], argmax[:, 11:-1])


def test_sampled_rows_are_seeded_draws_and_the_others_stay_greedy() -> None:
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    stream = torch.randint(5, target.config.vocab_size, (400,))
    args = argparse.Namespace(prefix=12, seq_len=31)
    rows = train_dflash.target_generations(target, stream, args, 4, seed=0, sampled=2)  # [4, 32]
    again = train_dflash.target_generations(target, stream, args, 4, seed=0, sampled=2)
    assert torch.equal(rows, again)
    with torch.no_grad():
        argmax = target(rows).logits.argmax(-1)
    assert torch.equal(rows[:2, 12:], argmax[:2, 11:-1])
    assert not torch.equal(rows[2:, 12:], argmax[2:, 11:-1])  # T = 1 draws leave the argmax somewhere


def test_blocks_start_at_the_first_generated_token_on_generated_data() -> None:
    assert train_dflash.first_anchor(argparse.Namespace(data="generated", prefix=128)) == 128
    assert train_dflash.first_anchor(argparse.Namespace(data="text", prefix=128)) == 1


@pytest.mark.slow
def test_smoke_run_writes_a_loadable_dflash_checkpoint(tmp_path) -> None:
    out = tmp_path / "dflash"
    cmd = [sys.executable, str(REPO / "jobs" / "train_dflash.py"), "--smoke", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO, timeout=180, capture_output=True)
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["data"] == "generated" and 0.0 <= stats["heldout_greedy_accepted"] <= 7.0
    draft = load_dflash(out)
    assert draft.config.dflash_config["block_size"] == 8
