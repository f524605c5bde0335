"""The StabilityMonitor's settings that no detector checks itself, refused at construction (one line each,
naming the option as the YAML spells it) rather than found mid-run."""

from __future__ import annotations

from typing import Optional


def check_settings(
    interval: int,
    flush_every: int,
    probe: str,
    probe_sequences: Optional[int],
    unigram_sample_tokens: int,
    spectral_every: int,
) -> None:
    if interval < 0:
        raise ValueError(f"stability.interval must be >= 0 (0 = no probe), got {interval!r}")
    if flush_every < 1:
        raise ValueError(f"stability.flush_every must be >= 1, got {flush_every!r}")
    if probe not in ("val", "train"):
        raise ValueError(f"stability.probe must be 'val' or 'train', got {probe!r}")
    if probe_sequences is not None and probe_sequences < 1:
        raise ValueError(f"stability.probe_sequences must be >= 1 or null, got {probe_sequences!r}")
    if unigram_sample_tokens < 1:
        raise ValueError(f"stability.unigram_sample_tokens must be >= 1, got {unigram_sample_tokens!r}")
    if spectral_every < 0:
        raise ValueError(f"stability.spectral_every must be >= 0 (0 = never), got {spectral_every!r}")
