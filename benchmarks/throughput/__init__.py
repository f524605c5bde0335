"""Training throughput of ANDREA: Lightning vs a bare PyTorch loop vs HF GPT-2 of the same shape.

    python benchmarks/throughput.py --preset andrea-tiny
    python benchmarks/throughput.py --preset andrea-small --batch-size 2 --block-size 256 --json small.json
    python benchmarks/throughput.py --preset andrea-120m --device cuda --precision bf16-mixed --compile
    python benchmarks/throughput.py --preset andrea-tiny --threads 1 --ablations a-nocheck,c-gelu   # shared CPU

One run trains the same model, on the same batches, with the same optimizer and precision, three ways:

    (a) lightning  AndreaLM through a real ``Trainer.fit`` (AndreaDataModule, TensorBoard logger to a
                   temporary directory, no checkpoints, no validation, no progress bar)
    (b) bare       the same ``Andrea`` module in a plain PyTorch loop (same data loader, same AdamW
                   built by ``AndreaLM.configure_optimizers``, same warmup+cosine schedule)
    (c) hf         ``transformers.GPT2LMHeadModel`` of identical shape (vocab, n_positions = block size,
                   n_embd, n_layer, n_head, stock ``gelu_new``, SDPA attention, all dropout 0) in
                   the same bare loop, with the same loss (cross-entropy of the fp32 logits)

and prints, for each: tokens/s and ms/step (medians of the timed steps after warm-up), peak memory,
MFU and the fraction of step time spent waiting for the data loader; then the ratios (a)/(b) and
(b)/(c). By default (``--schedule steps``) the three alternate step by step: after each Lightning
step a callback runs one step of (b) and one of (c) -- outside (a)'s timed span -- so a noisy shared
machine slows them alike, step for step; peak memory is then measured in a short run of each
variant alone afterwards. ``--schedule runs`` runs each variant alone instead, in rotating order
per round. Medians pool the timed steps of every round.

Step time is measured identically in every variant: the wall-clock time between the ends of two
consecutive optimizer steps (on CUDA, between CUDA events recorded there, so timing adds no host
sync), so everything the loop does per step counts -- fetching the batch, moving it, forward,
backward, optimizer and scheduler step, and in (a) Lightning's hooks and logging. Data wait is the
time inside ``next()`` on the loader (in (a) Lightning's own ``train_dataloader_next`` profiler
action, read by a tiny profiler). On the CPU the process's CPU time per step is recorded too: on
a shared machine it moves far less than wall-clock time when other processes take the cores.

MFU (model FLOPs utilisation, PaLM appendix B):

    FLOPs/token = 6·N + 12·L·H·Q·T          (= 6·N + 12·n_layer·d_model·T, since H·Q = d_model)
    MFU         = FLOPs/token × tokens/s ÷ matmul peak

* ``6·N``: each weight that takes part in a matmul costs 2 FLOPs per token forward and 4 backward.
  N = every stored parameter except the position table: the tied token embedding is counted once,
  because it does one matmul per token (the output head) while the input lookup is free; the
  position embeddings are only added, never multiplied. Biases and LayerNorm gains are included
  (< 1 % of N); they are what "all parameters" means in 6·N. Kaplan's non-embedding N would leave
  out the output head, which is 15 % of andrea-small's matmul work and more than half of andrea-tiny's.
* ``12·L·H·Q·T``: attention scores QKᵀ and the weighted sum AV are 2·2·T·d FLOPs per token per
  layer forward, ×3 with backward. Like PaLM we count all T keys although a causal mask needs
  only about half of them, so this is the conventional (not the minimal) count.
* The peak is measured in the same run, on the same device and dtype (fp32 for 32-true, bf16 for
  bf16-mixed): the best median rate of square ``torch.mm`` over a few sizes, measured once per
  round between the variants; MFU uses the median over rounds.

``--json PATH`` writes every figure, the per-step times and the machine (CPU model, cores, torch
version, device, date, load average). ``--ablations`` adds variants that isolate one cost each
(the table in ``variants.py``), to measure what a change to andrea_lab/ would gain.

The package: ``variants`` (what is trained, and each ablation as one row of a table), ``flops``
(FLOPs per token from the model's parameter breakdown), ``machine`` (device, memory, matmul peak),
``clock`` (step timing and the data), ``runners`` (the three ways of training), ``report`` (figures,
ratios, targets, the printed table) and ``cli`` (arguments and the rounds). ``benchmarks/throughput.py``
is the documented entry point; ``python -m benchmarks.throughput`` runs the same.
"""
