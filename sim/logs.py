"""Training-log text: what torchrun, NCCL, PyTorch and the trainer print, line by line.

Wording follows the reference (failures-and-formats.md §A9) character for character where it
gives one: rules match these strings with regexes, so a paraphrase here would test nothing.
Every function returns `LogLine`s on the true timeline; the CRI writer later stamps them with
the node's clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from whyjob.sim.clock import MS, SECOND, glog, py_logging, torchrun_time
from whyjob.sim.incident import LogLine

__all__ = [
    "Voice",
    "checkpoint_lines",
    "completion_lines",
    "cuda_error_lines",
    "cuda_oom_lines",
    "deepspeed_min_scale_lines",
    "io_error_lines",
    "keyerror_lines",
    "megatron_nan_lines",
    "nccl_init_lines",
    "nccl_remote_error_lines",
    "progress_line",
    "resume_lines",
    "save_failure_lines",
    "segfault_lines",
    "sigterm_lines",
    "startup_lines",
    "torchrun_failure_lines",
    "watchdog_lines",
]

SITE = "/usr/local/lib/python3.10/dist-packages"
WORKDIR = "/workspace"


@dataclass
class Voice:
    """Who is talking: one pod's torchrun and its local workers."""

    host: str  # the pod's hostname (pod name)
    node_rank: int
    nproc: int
    world: int  # total ranks = nodes × nproc
    framework: str  # hf | deepspeed | megatron
    script: str
    ip: str
    network: str  # efa | ib | socket
    rng: random.Random
    skew: int = 0  # the node's clock offset: timestamps printed inside lines use node time
    worker_pid0: int = 0

    def __post_init__(self) -> None:
        if not self.worker_pid0:
            self.worker_pid0 = self.rng.randint(40, 90)

    def grank(self, local: int) -> int:
        return self.node_rank * self.nproc + local

    def pid(self, local: int) -> int:
        return self.worker_pid0 + local

    @property
    def prints_rank0(self) -> bool:
        return self.node_rank == 0


def _line(at: int, text: str, stream: str = "stderr") -> LogLine:
    return LogLine(at, stream, text)


def _w(v: Voice, at: int, src: str, text: str, level: str = "W") -> LogLine:
    """A torch elastic logging line: `W0304 10:11:12.345000 1 torch/...py:793] text`."""
    return _line(at, f"{level}{glog(at + v.skew)} 1 {src}] {text}")


def _hf(v: Voice, at: int, src: str, text: str, level: str = "INFO") -> LogLine:
    """A transformers logging line: `[INFO|trainer.py:2243] 2026-03-04 10:11:12,345 >> text`."""
    return _line(at, f"[{level}|{src}] {py_logging(at + v.skew)} >> {text}")


def _ds(v: Voice, at: int, src: str, text: str, level: str = "INFO") -> LogLine:
    """A DeepSpeed logging line: `[2026-03-04 10:11:12,345] [INFO] [src] text`."""
    return _line(at, f"[{py_logging(at + v.skew)}] [{level}] [{src}] {text}")


# ---------------------------------------------------------------------------------------------
# start-up


def startup_lines(v: Voice, at: int, *, config_blob: bool = False) -> list[LogLine]:
    """torchrun's banner, then the trainer loading its model (rank 0 talks the most)."""
    run_src = "torch/distributed/run.py:793"
    out = [
        _w(v, at, run_src, ""),
        _w(v, at, run_src, "*****************************************"),
        _w(
            v,
            at,
            run_src,
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
            "to avoid your system being overloaded, please further tune the variable for optimal "
            "performance in your application as needed. ",
        ),
        _w(v, at, run_src, "*****************************************"),
    ]
    t = at + v.rng.randint(4, 9) * SECOND
    if v.framework == "megatron":
        if v.prints_rank0:
            out += [
                _line(
                    t,
                    f"using world size: {v.world}, data-parallel size: {v.world // 8}, context-parallel size: 1, "
                    "tensor-model-parallel size: 8, pipeline-model-parallel size: 1 ",
                    "stdout",
                ),
                _line(t, "> building GPT model ...", "stdout"),
                _line(
                    t + 9 * SECOND,
                    " > number of parameters on (tensor, pipeline) model "
                    f"parallel rank (0, 0): {v.rng.randint(800, 1900) * 1_000_000 + 425984}",
                    "stdout",
                ),
            ]
    else:
        if v.prints_rank0:
            model_dir = "/models/base"
            out += [
                _hf(
                    v,
                    t,
                    "configuration_utils.py:733",
                    f"loading configuration file {model_dir}/config.json",
                ),
                _hf(
                    v,
                    t + 2 * SECOND,
                    "modeling_utils.py:3937",
                    f"loading weights file {model_dir}/model.safetensors.index.json",
                ),
                _hf(
                    v,
                    t + 14 * SECOND,
                    "modeling_utils.py:4800",
                    "All model checkpoint weights were used when initializing the model.",
                ),
            ]
        if v.framework == "deepspeed" and v.prints_rank0:
            out.append(
                _ds(
                    v,
                    t + 15 * SECOND,
                    "logging.py:128:log_dist",
                    "[Rank 0] DeepSpeed info: version=0.15.4, git-hash=unknown, git-branch=unknown",
                )
            )
    if config_blob and v.prints_rank0:
        # Some launch scripts log the resolved config, shard list included, as one JSON line;
        # past 16 KiB the runtime splits it into partial (P) CRI lines.
        shards = ", ".join(
            f'"/data/tokenized/train-{i:05d}-of-02048.arrow"' for i in range(0, 2048, 4)
        )
        out.append(
            _line(
                t + 1 * SECOND,
                '{"event": "resolved_config", "seed": 1234, '
                f'"train_files": [{shards}], "eval_files": []}}',
                "stdout",
            )
        )
    return out


def _network_lines(v: Voice, at: int, local: int, tid: int) -> list[LogLine]:
    who = f"{v.host}:{v.pid(local)}:{tid} [{local}]"
    if v.network == "ib":
        nics = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(8))
        return [
            _line(at, f"{who} NCCL INFO NET/IB : Using {nics} ; OOB eth0:{v.ip}<0>", "stdout"),
            _line(at, f"{who} NCCL INFO Using network IB", "stdout"),
        ]
    if v.network == "efa":
        return [
            _line(
                at,
                f"{who} NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct "
                "(found 32 nics)",
                "stdout",
            ),
            _line(at, f"{who} NCCL INFO Using network Libfabric", "stdout"),
        ]
    return [
        _line(at, f"{who} NCCL INFO NET/Socket : Using [0]eth0:{v.ip}<0>", "stdout"),
        _line(at, f"{who} NCCL INFO Using network Socket", "stdout"),
    ]


def nccl_init_lines(v: Voice, at: int, bus_ids: list[str], comm_id: str) -> list[LogLine]:
    """NCCL_DEBUG=INFO start-up, for every local rank: bootstrap, network, comm init."""
    out: list[LogLine] = []
    for local in range(v.nproc):
        pid = v.pid(local)
        tid = pid + v.rng.randint(150, 400)
        t = at + local * v.rng.randint(1, 30) * MS
        who0 = f"{v.host}:{pid}:{pid} [{local}]"
        who = f"{v.host}:{pid}:{tid} [{local}]"
        grank = v.grank(local)
        comm = f"0x55{v.rng.getrandbits(40):010x}"
        out.append(_line(t, f"{who0} NCCL INFO Bootstrap : Using eth0:{v.ip}<0>", "stdout"))
        out.append(_line(t, f"{who0} NCCL INFO cudaDriverVersion 12040", "stdout"))
        if grank == 0:
            out.append(_line(t, "NCCL version 2.21.5+cuda12.4", "stdout"))
        t += v.rng.randint(200, 900) * MS
        out += _network_lines(v, t, local, tid)
        head = (
            f"{who} NCCL INFO comm {comm} rank {grank} nranks {v.world} cudaDev {local} "
            f"nvmlDev {local} busId {bus_ids[local]} commId 0x{comm_id}"
        )
        out.append(_line(t, f"{head} - Init START", "stdout"))
        out.append(_line(t + v.rng.randint(800, 3000) * MS, f"{head} - Init COMPLETE", "stdout"))
    return out


def resume_lines(v: Voice, at: int, framework: str, ckpt_dir: str, step: int) -> list[LogLine]:
    if not v.prints_rank0:
        return []
    if framework == "megatron":
        return [
            _line(
                at, f" loading distributed checkpoint from {ckpt_dir} at iteration {step}", "stdout"
            ),
            _line(
                at + 40 * SECOND,
                f"  successfully loaded checkpoint from {ckpt_dir} "
                f"[ t 1/8, p 1/1 ] at iteration {step}",
                "stdout",
            ),
        ]
    path = f"{ckpt_dir}/checkpoint-{step}"
    return [
        _hf(v, at, "trainer.py:2394", f"Loading model from {path}."),
        _hf(
            v,
            at + 30 * SECOND,
            "trainer.py:2415",
            "  Continuing training from checkpoint, will skip to saved global_step",
        ),
        _hf(v, at + 30 * SECOND, "trainer.py:2416", "  Continuing training from epoch 0"),
        _hf(
            v, at + 30 * SECOND, "trainer.py:2417", f"  Continuing training from global step {step}"
        ),
    ]


def training_banner(v: Voice, at: int, framework: str, max_steps: int) -> list[LogLine]:
    if not v.prints_rank0:
        return []
    if framework == "megatron":
        return [
            _line(
                at,
                f"[after model, optimizer, and learning rate scheduler are built] "
                f"datetime: {py_logging(at + v.skew)[:19]} ",
                "stdout",
            ),
            _line(at, "training ...", "stdout"),
        ]
    batch = v.world * 8 * 4
    return [
        _hf(v, at, "trainer.py:2243", "***** Running training *****"),
        _hf(v, at, "trainer.py:2244", f"  Num examples = {max_steps * batch:,}"),
        _hf(v, at, "trainer.py:2245", "  Num Epochs = 1"),
        _hf(v, at, "trainer.py:2246", "  Instantaneous batch size per device = 8"),
        _hf(
            v,
            at,
            "trainer.py:2249",
            f"  Total train batch size (w. parallel, distributed & accumulation) = {batch:,}",
        ),
        _hf(v, at, "trainer.py:2250", "  Gradient Accumulation steps = 4"),
        _hf(v, at, "trainer.py:2251", f"  Total optimization steps = {max_steps:,}"),
    ]


# ---------------------------------------------------------------------------------------------
# steady state


def progress_line(
    at: int,
    framework: str,
    step: int,
    max_steps: int,
    loss: float,
    step_ms: float,
    world: int,
    *,
    skew: int = 0,
) -> LogLine:
    if framework == "megatron":
        lr = 3.0e-4 * min(1.0, step / 2000)
        return _line(
            at,
            f" [{py_logging(at + skew)[:19]}] iteration {step:>8d}/{max_steps:>8d} | consumed samples: "
            f"{step * 512:>12d} | elapsed time per iteration (ms): {step_ms:.1f} | learning "
            f"rate: {lr:.6E} | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 "
            f"| grad norm: {0.2 + loss / 20:.3f} | number of skipped iterations:   0 | number of "
            "nan iterations:   0 |",
            "stdout",
        )
    lr = 5e-5 * (1 - step / max(max_steps, 1))
    return _line(
        at,
        f"{{'loss': {loss:.4f}, 'grad_norm': {0.3 + loss / 10:.4f}, 'learning_rate': {lr:.4e}, "
        f"'epoch': {step / max(max_steps, 1):.2f}}}",
        "stdout",
    )


def checkpoint_lines(
    v: Voice, at: int, framework: str, ckpt_dir: str, step: int, took: int
) -> list[LogLine]:
    """Rank 0's save: start line, then the line that proves it finished."""
    if framework == "megatron":
        return [
            _line(
                at,
                f"saving checkpoint at iteration {step:>7d} to {ckpt_dir} in torch_dist format",
                "stdout",
            ),
            _line(
                at + took,
                f"  successfully saved checkpoint from iteration {step:>7d} to "
                f"{ckpt_dir} [ t 1/8, p 1/1 ]",
                "stdout",
            ),
        ]
    path = f"{ckpt_dir}/checkpoint-{step}"
    out = [_hf(v, at, "trainer.py:3705", f"Saving model checkpoint to {path}")]
    if framework == "deepspeed":
        out += [
            _ds(
                v,
                at + took // 2,
                "torch_checkpoint_engine.py:33:commit",
                f"[Torch] Checkpoint global_step{step} is ready now!",
            ),
        ]
    out += [
        _hf(
            v, at + took, "configuration_utils.py:472", f"Configuration saved in {path}/config.json"
        ),
        _hf(
            v,
            at + took,
            "modeling_utils.py:2690",
            f"Model weights saved in {path}/model.safetensors",
        ),
    ]
    return out


def completion_lines(
    v: Voice, at: int, framework: str, runtime_s: float, loss: float
) -> list[LogLine]:
    out: list[LogLine] = []
    if v.prints_rank0:
        if framework == "megatron":
            out.append(
                _line(
                    at,
                    f"[after training is done] datetime: {py_logging(at + v.skew)[:19]} ",
                    "stdout",
                )
            )
        else:
            out.append(_hf(v, at, "trainer.py:2505", ""))
            out.append(_line(at, "", "stderr"))
            out.append(
                _line(
                    at,
                    "Training completed. Do not forget to share your model on "
                    "huggingface.co/models =)",
                    "stderr",
                )
            )
            out.append(_line(at, "", "stderr"))
            out.append(
                _line(
                    at + SECOND,
                    f"{{'train_runtime': {runtime_s:.4f}, "
                    f"'train_samples_per_second': {v.world * 96 / 3.2:.3f}, "
                    f"'train_steps_per_second': {1 / 3.2:.3f}, 'train_loss': "
                    f"{loss:.4f}, 'epoch': 1.0}}",
                    "stdout",
                )
            )
    t = at + 3 * SECOND
    out.append(
        _w(
            v,
            t,
            "torch/distributed/elastic/agent/server/api.py:879",
            "[default] worker group successfully finished. Waiting 300 seconds for other "
            "agents to finish.",
            "I",
        )
    )
    out.append(
        _w(
            v,
            t + 2 * SECOND,
            "torch/distributed/elastic/agent/server/api.py:932",
            "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for "
            "other agents to finish",
            "I",
        )
    )
    out.append(
        _w(
            v,
            t + 3 * SECOND,
            "torch/distributed/elastic/agent/server/api.py:946",
            f"Done waiting for other agents. Elapsed: {v.rng.uniform(0.4, 3.0):.4f} seconds",
            "I",
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# failures


def _traceback(grank: int, frames: list[tuple[str, int, str, str]], tail: list[str]) -> list[str]:
    """A Python traceback as torchrun's workers print it, every line prefixed `[rankN]: `."""
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        lines.append(f'  File "{path}", line {lineno}, in {func}')
        lines.append(f"    {code}")
    lines += tail
    return [f"[rank{grank}]: {line}" for line in lines]


def _train_frames(script: str, framework: str) -> list[tuple[str, int, str, str]]:
    main = f"{WORKDIR}/{script}"
    if framework == "megatron":
        return [
            (main, 231, "<module>", "pretrain("),
            (
                f"{WORKDIR}/megatron/training/training.py",
                386,
                "pretrain",
                "iteration, num_floating_point_operations_so_far = train(",
            ),
            (
                f"{WORKDIR}/megatron/training/training.py",
                1407,
                "train",
                "train_step(forward_step_func,",
            ),
            (
                f"{WORKDIR}/megatron/training/training.py",
                754,
                "train_step",
                "losses_reduced = forward_backward_func(",
            ),
        ]
    return [
        (main, 188, "<module>", "main()"),
        (main, 171, "main", "trainer.train(resume_from_checkpoint=last_checkpoint)"),
        (f"{SITE}/transformers/trainer.py", 2123, "train", "return inner_training_loop("),
        (
            f"{SITE}/transformers/trainer.py",
            2481,
            "_inner_training_loop",
            "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
        ),
    ]


def cuda_error_lines(
    v: Voice, at: int, local: int, error: str, *, script: str, framework: str
) -> list[LogLine]:
    """`RuntimeError: CUDA error: <error>` with PyTorch's three advice lines."""
    frames = [
        *_train_frames(script, framework),
        (f"{SITE}/torch/_tensor.py", 581, "backward", "torch.autograd.backward("),
        (f"{SITE}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
        (
            f"{SITE}/torch/autograd/graph.py",
            825,
            "_engine_run_backward",
            "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run "
            "the backward pass",
        ),
    ]
    tail = [
        f"RuntimeError: CUDA error: {error}",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
    ]
    return [_line(at, text) for text in _traceback(v.grank(local), frames, tail)]


def cuda_oom_lines(
    v: Voice,
    at: int,
    local: int,
    total_gib: float,
    rng: random.Random,
    *,
    script: str,
    framework: str,
) -> list[LogLine]:
    """torch.OutOfMemoryError, worded exactly as the c10 caching allocator words it."""
    tried = rng.uniform(1.5, 12.0)
    free = rng.uniform(0.2, min(tried - 0.1, 3.0))
    in_use = total_gib - free
    allocated = in_use - rng.uniform(0.4, 2.5)
    reserved_mib = rng.uniform(20, 900)
    frames = [
        *_train_frames(script, framework),
        (
            f"{SITE}/torch/nn/modules/module.py",
            1747,
            "_call_impl",
            "return forward_call(*args, **kwargs)",
        ),
        (
            f"{SITE}/torch/nn/functional.py",
            3479,
            "cross_entropy",
            "return torch._C._nn.cross_entropy_loss(",
        ),
    ]
    message = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU "
        f"{local} has a total capacity of {total_gib:.2f} GiB of which {free:.2f} GiB is free. "
        f"Including non-PyTorch memory, this process has {in_use:.2f} GiB memory in use. Of the "
        f"allocated memory {allocated:.2f} GiB is allocated by PyTorch, and {reserved_mib:.2f} "
        "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        "See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    return [_line(at, text) for text in _traceback(v.grank(local), frames, [message])]


def keyerror_lines(v: Voice, at: int, local: int, *, script: str) -> list[LogLine]:
    main = f"{WORKDIR}/{script}"
    frames = [
        (main, 188, "<module>", "main()"),
        (main, 171, "main", "trainer.train(resume_from_checkpoint=last_checkpoint)"),
        (f"{SITE}/transformers/trainer.py", 2123, "train", "return inner_training_loop("),
        (
            f"{SITE}/transformers/trainer.py",
            2427,
            "_inner_training_loop",
            "for step, inputs in enumerate(epoch_iterator):",
        ),
        (f"{SITE}/torch/utils/data/dataloader.py", 701, "__next__", "data = self._next_data()"),
        (
            f"{SITE}/torch/utils/data/dataloader.py",
            757,
            "_next_data",
            "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration",
        ),
        (
            f"{WORKDIR}/data/collate.py",
            42,
            "__call__",
            'batch = [ex["input_ids"] for ex in examples]',
        ),
    ]
    return [_line(at, t) for t in _traceback(v.grank(local), frames, ["KeyError: 'input_ids'"])]


def io_error_lines(v: Voice, at: int, local: int, path: str, worker: int) -> list[LogLine]:
    """A DataLoader worker's EIO re-raised in the main process."""
    frames = [
        (f"{WORKDIR}/{v.script}", 188, "<module>", "main()"),
        (f"{SITE}/torch/utils/data/dataloader.py", 701, "__next__", "data = self._next_data()"),
        (
            f"{SITE}/torch/utils/data/dataloader.py",
            1465,
            "_next_data",
            "return self._process_data(data)",
        ),
        (f"{SITE}/torch/utils/data/dataloader.py", 1491, "_process_data", "data.reraise()"),
        (f"{SITE}/torch/_utils.py", 715, "reraise", "raise exception"),
    ]
    tail = [
        f"OSError: Caught OSError in DataLoader worker process {worker}.",
        "Original Traceback (most recent call last):",
        f'  File "{SITE}/torch/utils/data/_utils/worker.py", line 351, in _worker_loop',
        "    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]",
        f'  File "{WORKDIR}/data/shards.py", line 77, in __getitem__',
        '    with open(self.files[shard], "rb") as handle:',
        f"OSError: [Errno 5] Input/output error: '{path}'",
        "",
    ]
    return [_line(at, t) for t in _traceback(v.grank(local), frames, tail)]


def save_failure_lines(
    v: Voice, at: int, ckpt_dir: str, step: int, kind: str, rng: random.Random
) -> list[LogLine]:
    """torch.save onto a full (ENOSPC) or read-only filesystem, seen from rank 0."""
    path = f"{ckpt_dir}/checkpoint-{step}"
    frames = [
        (f"{WORKDIR}/{v.script}", 188, "<module>", "main()"),
        (
            f"{SITE}/transformers/trainer.py",
            2599,
            "_inner_training_loop",
            "self._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch, ignore_keys_"
            "for_eval)",
        ),
        (
            f"{SITE}/transformers/trainer.py",
            3107,
            "_save_checkpoint",
            "self._save_optimizer_and_scheduler(output_dir)",
        ),
        (
            f"{SITE}/transformers/trainer.py",
            3219,
            "_save_optimizer_and_scheduler",
            "torch.save(self.optimizer.state_dict(), os.path.join(output_dir, OPTIMIZER_NAME))",
        ),
        (
            f"{SITE}/torch/serialization.py",
            849,
            "save",
            "with _open_zipfile_writer(f) as opened_zipfile:",
        ),
    ]
    if kind == "enospc":
        tail = [
            f"RuntimeError: [enforce fail at inline_container.cc:{rng.choice((603, 764, 778))}] . "
            f"PytorchStreamWriter failed writing file data/{rng.randint(3, 400)}: file write "
            "failed",
        ]
        tail_after = [
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            f'  File "{SITE}/torch/serialization.py", line 690, in __exit__',
            "    self.file_like.write_end_of_file()",
            "OSError: [Errno 28] No space left on device",
        ]
        tail += tail_after
    else:
        tail = [f"OSError: [Errno 30] Read-only file system: '{path}/optimizer.pt'"]
    out = [_hf(v, at, "trainer.py:3705", f"Saving model checkpoint to {path}")]
    out += [_line(at + 40 * SECOND, t) for t in _traceback(v.grank(0), frames, tail)]
    return out


def deepspeed_min_scale_lines(v: Voice, at: int, local: int, scale: int) -> list[LogLine]:
    """fp16 dynamic loss scaling hitting its floor: a run of OVERFLOW lines, then the abort."""
    grank = v.grank(local)
    out = []
    t = at - 30 * SECOND
    attempted = scale * 4
    while attempted > scale:
        out.append(
            _ds(
                v,
                t,
                "loss_scaler.py:190:update_scale",
                f"[deepspeed] OVERFLOW! Rank {grank} Skipping step. Attempted loss scale: "
                f"{attempted}, reducing to {attempted // 2}",
            )
        )
        attempted //= 2
        t += 8 * SECOND
    frames = [
        (f"{WORKDIR}/{v.script}", 188, "<module>", "main()"),
        (f"{SITE}/deepspeed/runtime/engine.py", 2213, "step", "self._take_model_step(lr_kwargs)"),
        (
            f"{SITE}/deepspeed/runtime/zero/stage_1_and_2.py",
            1851,
            "step",
            "self._update_scale(self.overflow)",
        ),
        (f"{SITE}/deepspeed/runtime/fp16/loss_scaler.py", 175, "update_scale", "raise Exception("),
    ]
    tail = [
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run."
    ]
    out.append(
        _line(
            at,
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
            "stdout",
        )
    )
    out += [_line(at, t) for t in _traceback(grank, frames, tail)]
    return out


def megatron_nan_lines(v: Voice, at: int, local: int, node_label: str) -> list[LogLine]:
    grank = v.grank(local)
    frames = [
        *_train_frames(v.script, "megatron"),
        (
            f"{WORKDIR}/megatron/core/distributed/param_and_grad_buffer.py",
            178,
            "check_for_nan_in_grad",
            "assert not norm_is_nan, (",
        ),
    ]
    tail = [
        f"AssertionError: Rank {grank}: found NaN in local grad norm in backward pass before "
        f"data-parallel communication collective. Device: {local}, node: {node_label}"
    ]
    return [_line(at, t) for t in _traceback(grank, frames, tail)]


def segfault_lines(v: Voice, at: int, local: int) -> list[LogLine]:
    """faulthandler's dump for a worker that took SIGSEGV inside a CUDA extension."""
    tid = 0x7F0000000000 + v.rng.getrandbits(32) * 0x1000
    lines = [
        "Fatal Python error: Segmentation fault",
        "",
        f"Thread 0x{tid:016x} (most recent call first):",
        f'  File "{SITE}/torch/utils/data/_utils/pin_memory.py", line 54 in do_one_step',
        f'  File "{SITE}/torch/utils/data/_utils/pin_memory.py", line 59 in _pin_memory_loop',
        '  File "/usr/lib/python3.10/threading.py", line 953 in run',
        "",
        f"Current thread 0x{tid + 0x1B4000:016x} (most recent call first):",
        f'  File "{SITE}/flash_attn/flash_attn_interface.py", line 96 in _flash_attn_forward',
        f'  File "{SITE}/torch/nn/modules/module.py", line 1747 in _call_impl',
        f'  File "{WORKDIR}/{v.script}", line 143 in training_step',
        f'  File "{WORKDIR}/{v.script}", line 188 in <module>',
        "",
        "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft, "
        "torch._C._linalg, torch._C._nn, torch._C._sparse, torch._C._special (total: 41)",
    ]
    return [_line(at, text) for text in lines]


def nccl_remote_error_lines(
    v: Voice, at: int, local: int, peer_ip: str, peer_port: int, ib_status: int
) -> list[LogLine]:
    """The watchdog thread dying on ncclRemoteError, with NCCL's last WARN as `Last error`."""
    grank = v.grank(local)
    tid = v.pid(local) + 211
    vendor = 129 if ib_status == 12 else 244
    opcode, length = (0, 0) if ib_status == 12 else (48, 32764)
    warn = (
        f"NET/IB : Got completion from peer {peer_ip}<{peer_port}> with error {ib_status}, "
        f"opcode {opcode}, len {length}, vendor err {vendor}"
    )
    stamp = glog(at + v.skew, nanos=True, salt=grank)
    out = [
        _line(
            at,
            f"{v.host}:{v.pid(local)}:{tid} [{local}] transport/net_ib.cc:1696 NCCL WARN {warn}",
            "stdout",
        ),
        _line(
            at,
            f"{v.host}:{v.pid(local)}:{tid} [{local}] NCCL INFO transport/net.cc:1302 -> 6",
            "stdout",
        ),
        _line(
            at + 5 * MS,
            f"[rank{grank}]:[E{stamp} ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID "
            f"0(default_pg) Rank {grank}] Process group watchdog thread terminated with "
            "exception: NCCL error: remote process exited or there was a network error, NCCL "
            "version 2.21.5",
        ),
        _line(
            at + 5 * MS,
            "ncclRemoteError: A call failed possibly due to a network error or a "
            "remote process exiting prematurely.",
        ),
        _line(at + 5 * MS, "Last error:"),
        _line(at + 5 * MS, warn),
        _line(
            at + 6 * MS, "terminate called after throwing an instance of 'c10::DistBackendError'"
        ),
    ]
    return out


def watchdog_lines(
    v: Voice,
    at: int,
    *,
    seq: int,
    op: str,
    numel: int,
    last_enqueued: int,
    last_completed: int,
    locals_: range | None = None,
) -> list[LogLine]:
    """ProcessGroupNCCL's watchdog timeout block, once per local rank (reference §A9)."""
    out: list[LogLine] = []
    for local in locals_ if locals_ is not None else range(v.nproc):
        grank = v.grank(local)
        t = at + local * v.rng.randint(2, 40) * MS
        ran_for = 600_000 + v.rng.randint(3, 95)
        stamp = glog(t + v.skew, nanos=True, salt=grank * 7)
        work = (
            f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            f"Timeout(ms)=600000)"
        )
        head = f"[rank{grank}]:[E{stamp} "
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {grank}]"
        out += [
            _line(
                t,
                f"{head}ProcessGroupNCCL.cpp:629] [Rank {grank}] Watchdog caught collective "
                f"operation timeout: {work} ran for {ran_for} milliseconds before timing out.",
            ),
            _line(
                t,
                f"{head}ProcessGroupNCCL.cpp:2168] {pg}  failure detected by watchdog at "
                f"work sequence id: {seq} PG status: last enqueued work: {last_enqueued}, last "
                f"completed work: {last_completed}",
            ),
            _line(
                t,
                f"{head}ProcessGroupNCCL.cpp:667] Stack trace of the failed collective not "
                "found, potentially because FlightRecorder is disabled. You can enable it by "
                "setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
            ),
            _line(
                t,
                f"{head}ProcessGroupNCCL.cpp:681] [Rank {grank}] Some NCCL operations have "
                "failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                "subsequent GPU operations might run on corrupted/incomplete data.",
            ),
            _line(
                t,
                f"{head}ProcessGroupNCCL.cpp:695] [Rank {grank}] To avoid data "
                "inconsistency, we are taking the entire process down.",
            ),
            _line(
                t + 1 * MS,
                f"{head}ProcessGroupNCCL.cpp:1895] {pg} Process group watchdog "
                f"thread terminated with exception: [Rank {grank}] Watchdog caught collective "
                f"operation timeout: {work} ran for {ran_for} milliseconds before timing out.",
            ),
            _line(
                t + 1 * MS, "terminate called after throwing an instance of 'c10::DistBackendError'"
            ),
            _line(
                t + 1 * MS,
                f"  what():  {pg} Process group watchdog thread terminated with "
                f"exception: [Rank {grank}] Watchdog caught collective operation timeout: "
                f"{work} ran for {ran_for} milliseconds before timing out.",
            ),
            _line(
                t + 1 * MS,
                "Exception raised from checkTimeout at "
                "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632 (most recent call "
                "first):",
            ),
            _line(
                t + 1 * MS,
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + "
                f"0x96 (0x7f{v.rng.getrandbits(40):010x} in {SITE}/torch/lib/libc10.so)",
            ),
        ]
    return out


def torchrun_failure_lines(
    v: Voice,
    at: int,
    failures: list[tuple[int, int, int]],  # (local rank, exit code, time)
    *,
    binary: str = "/usr/bin/python3",
) -> list[LogLine]:
    """The elastic agent tearing down its workers and printing ChildFailedError's summary."""
    first_local, first_code, first_at = failures[0]
    failed_locals = {local for local, _, _ in failures}
    t = at
    out = [
        _w(
            v,
            t,
            "torch/distributed/elastic/multiprocessing/api.py:897",
            f"Sending process {v.pid(local)} closing signal SIGTERM",
        )
        for local in range(v.nproc)
        if local not in failed_locals
    ]
    t += v.rng.randint(300, 2500) * MS
    out.append(
        _w(
            v,
            t,
            "torch/distributed/elastic/multiprocessing/api.py:869",
            f"failed (exitcode: {first_code}) local_rank: {first_local} (pid: "
            f"{v.pid(first_local)}) of binary: {binary}",
            "E",
        )
    )
    frames = [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (
            f"{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py",
            355,
            "wrapper",
            "return f(*args, **kwargs)",
        ),
        (f"{SITE}/torch/distributed/run.py", 919, "main", "run(args)"),
        (f"{SITE}/torch/distributed/run.py", 910, "run", "elastic_launch("),
        (
            f"{SITE}/torch/distributed/launcher/api.py",
            138,
            "__call__",
            "return launch_agent(self._config, self._entrypoint, list(args))",
        ),
        (
            f"{SITE}/torch/distributed/launcher/api.py",
            269,
            "launch_agent",
            "raise ChildFailedError(",
        ),
    ]
    text = ["Traceback (most recent call last):"]
    for path, lineno, func, source in frames:
        text += [f'  File "{path}", line {lineno}, in {func}', f"    {source}"]

    def block(index: int, local: int, code: int, when: int) -> list[str]:
        pid = v.pid(local)
        if code < 0:
            signal = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -7: "SIGBUS", -15: "SIGTERM"}
            trace = f"Signal {-code} ({signal.get(code, 'SIG?')}) received by PID {pid}"
        else:
            trace = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return [
            f"[{index}]:",
            f"  time      : {torchrun_time(when + v.skew)}",
            f"  host      : {v.host}",
            f"  rank      : {v.grank(local)} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {pid})",
            "  error_file: <N/A>",
            f"  traceback : {trace}",
        ]

    text += [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        f"{v.script} FAILED",
        "------------------------------------------------------------",
        "Failures:",
    ]
    others = failures[1:]
    if others:
        for index, (other, code, when) in enumerate(others, start=1):
            text += block(index, other, code, when)
    else:
        text.append("  <NO_OTHER_FAILURES>")
    text += [
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        *block(0, first_local, first_code, first_at),
        "============================================================",
    ]
    out += [_line(t, line) for line in text]
    return out


def sigterm_lines(v: Voice, at: int) -> list[LogLine]:
    """torchrun receiving SIGTERM (pod deleted or evicted) and passing it to its workers."""
    out = [
        _w(
            v,
            at,
            "torch/distributed/elastic/agent/server/api.py:704",
            "Received Signals.SIGTERM death signal, shutting down workers",
        )
    ]
    out += [
        _w(
            v,
            at + MS,
            "torch/distributed/elastic/multiprocessing/api.py:897",
            f"Sending process {v.pid(local)} closing signal SIGTERM",
        )
        for local in range(v.nproc)
    ]
    return out
