"""Tracebacks put back together from interleaved, prefixed, chained and cut-off log lines."""

from __future__ import annotations

from whyjob.collector.ingest.tracebacks import TracebackTracker


def _feed(lines: list[str]) -> list:  # type: ignore[type-arg]
    tracker = TracebackTracker()
    out = []
    for number, text in enumerate(lines, start=1):
        out.extend(tracker.feed(number, text))
    return out + tracker.close()


def test_a_plain_traceback() -> None:
    (tb,) = _feed(
        [
            "step 100 loss 2.1",
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 214, in <module>',
            "    main()",
            '  File "/usr/lib/python3/dist-packages/transformers/trainer.py", line 3107, in _save_checkpoint',
            "    torch.save(state, path)",
            "    ^^^^^^^^^^^^^^^^^^^^^^^",
            "OSError: [Errno 30] Read-only file system: '/ckpt/checkpoint-1400/optimizer.pt'",
        ]
    )
    assert (tb.exception, tb.functions, tb.first_line, tb.last_line) == (
        "OSError",
        ["<module>", "_save_checkpoint"],
        2,
        8,
    )
    assert tb.detail == "[Errno 30] Read-only file system: '/ckpt/checkpoint-1400/optimizer.pt'"
    assert not tb.truncated and not tb.chained


def test_interleaved_ranks_and_qualified_exception_names() -> None:
    done = _feed(
        [
            "[rank0]: Traceback (most recent call last):",
            "[rank1]: Traceback (most recent call last):",
            '[rank0]:   File "train.py", line 9, in step',
            '[rank1]:   File "train.py", line 12, in forward',
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "[rank0]: KeyError: 'input_ids'",
        ]
    )
    assert [(t.rank, t.exception, t.functions) for t in done] == [
        ("1", "torch.OutOfMemoryError", ["forward"]),
        ("0", "KeyError", ["step"]),
    ]


def test_chains_keep_the_first_exception_first() -> None:
    done = _feed(
        [
            "Traceback (most recent call last):",
            '  File "data.py", line 3, in read',
            "OSError: [Errno 5] Input/output error",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "train.py", line 8, in <module>',
            "RuntimeError: DataLoader worker (pid 4242) exited unexpectedly",
        ]
    )
    assert [(t.exception, t.chained) for t in done] == [("OSError", False), ("RuntimeError", True)]


def test_cut_off_tracebacks_are_kept_as_truncated() -> None:
    done = _feed(
        [
            "Traceback (most recent call last):",
            '  File "train.py", line 8, in <module>',
            "2026-03-04 10:13:00,000 INFO the log moved on",
            "Traceback (most recent call last):",
            '  File "train.py", line 9, in step',
        ]
    )
    assert [(t.truncated, t.exception, t.summary) for t in done] == [
        (True, None, "truncated traceback in <module>"),
        (True, None, "truncated traceback in step"),
    ]


def test_any_class_a_module_qualifies_ends_a_traceback_but_not_a_bare_word() -> None:
    frames = ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in <module>']
    ended = {
        "botocore.errorfactory.NoSuchKey: An error occurred (NoSuchKey)": "botocore.errorfactory.NoSuchKey",
        "fsspec.exceptions.FSTimeoutError": "fsspec.exceptions.FSTimeoutError",
        "socket.timeout: timed out": "socket.timeout",
        "StopIteration": "StopIteration",
        "Node: 'HorovodAllreduce_grads_0'": None,  # TensorFlow's op line, not an exception
    }
    for last, name in ended.items():
        (tb,) = _feed([*frames, last])
        assert tb.exception == name, last
        assert tb.truncated is (name is None)


def test_ipython_tracebacks_name_the_exception_in_their_header() -> None:
    ipython8 = [
        "---------------------------------------------------------------------------",
        "ValueError                                Traceback (most recent call last)",
        "Cell In[11], line 1",
        "----> 1 trainer.train()",
        "",
        "File ~/env/lib/python3.13/site-packages/transformers/trainer.py:2198, in Trainer.train(self, **kwargs)",
        "   2197 hf_hub_utils.disable_progress_bars()",
        "-> 2198     return inner_training_loop(",
    ]
    (cut,) = _feed(ipython8)  # the paste ends before the exception's own line
    assert (cut.exception, cut.functions, cut.truncated) == (
        "ValueError",
        ["<cell>", "Trainer.train"],
        True,
    )
    (whole,) = _feed([*ipython8, "", "ValueError: label_names is empty"])
    assert (whole.exception, whole.detail, whole.truncated) == (
        "ValueError",
        "label_names is empty",
        False,
    )
    ipython7 = [
        "KeyError                                  Traceback (most recent call last)",
        "<ipython-input-3-8f1b> in <module>()",
        "----> 1 d['x']",
        "/usr/lib/python3/dist-packages/foo.py in bar(self, x)",
        "---> 13     return self.d[x]",
        "KeyError: 'x'",
    ]
    (old,) = _feed(ipython7)
    assert (old.functions, old.detail) == (["<module>", "bar"], "'x'")


def test_frames_that_lost_their_indent_in_a_paste_are_still_frames() -> None:
    (tb,) = _feed(
        [
            'File "verl/utils/checkpoint/megatron_checkpoint_manager.py", line 334, in load_checkpoint',
            "    self.optimizer.load_state_dict(optimizer_state_dict)",
            "RuntimeError: Expected 2 entries in state dict, but got 4.",
        ]
    )
    assert (tb.functions, tb.exception) == (["load_checkpoint"], "RuntimeError")


def test_a_doubled_rank_prefix_is_one_rank() -> None:
    (tb,) = _feed(
        [
            "[rank0]:[rank0]: Traceback (most recent call last):",
            '[rank0]:[rank0]:   File "/w/ttt_layer.py", line 321, in forward',
            "[rank0]:[rank0]:     hidden_states.size(1) % self.config.mini_batch_size == 0",
            "[rank0]:[rank0]: AssertionError: Sequence len must be multiple of mini batch size.",
        ]
    )
    assert (tb.rank, tb.exception, tb.functions) == ("0", "AssertionError", ["forward"])
