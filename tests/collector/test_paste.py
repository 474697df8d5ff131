"""Pasted text split into what each reader understands (`whyjob diagnose`'s input)."""

from __future__ import annotations

from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.ingest.paste import _undouble, read_paste
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.standins import PASTED_POD
from whyjob.core.timeutil import format_ts

NOW = 1_795_400_000_000


def _read(text: str) -> list[Item]:
    return list(read_paste("paste.txt", text.encode(), IngestOptions(at=NOW)))


def _evidence(items: list[Item]) -> list[Evidence]:
    return [item for item in items if isinstance(item, Evidence)]


MIXED = """\
$ kubectl get pods -n ml
NAME                READY   STATUS             RESTARTS        AGE
bert-pt-worker-0    0/1     CrashLoopBackOff   5 (2m ago)      40m
bert-pt-worker-1    1/1     Running            0               40m
$ kubectl get events -n ml
LAST SEEN   TYPE      REASON      OBJECT                 MESSAGE
12m         Warning   Evicted     pod/bert-pt-worker-1   The node was low on resource: memory. Threshold quantity: 100Mi, available: 91340Ki.
2026/11/21 23:12:05 INF Adding new event to the event store event={"Description":"Spot ITN received. Instance will be interrupted at 2026-11-21T23:14:05Z \\n","EventID":"spot-itn-a2b3","InstanceID":"i-0abc123def4567890","Kind":"SPOT_ITN","NodeName":"ip-10-0-1-2.ec2.internal","StartTime":"2026-11-21T23:14:05Z"}
I1121 23:20:11.123456       1 scale_down.go:1102] Scale-down: removing empty node "ip-10-0-9-9.ec2.internal"
"""


def test_a_mixed_paste_is_cut_into_tables_controller_lines_and_the_log() -> None:
    items = _read(MIXED)
    pods = sorted(item.name for item in items if isinstance(item, PodRecord))
    # The table ends at the next prompt: neither the prompt nor later lines become pods.
    assert pods == ["bert-pt-worker-0", "bert-pt-worker-1"]
    by_kind = {(ev.kind, ev.origin): ev for ev in _evidence(items)}
    waiting = by_kind["container.waiting", "paste.txt:3"]
    assert waiting.pod == "bert-pt-worker-0" and waiting.attrs["reason"] == "CrashLoopBackOff"
    evicted = by_kind["k8s.event", "paste.txt:7"]
    assert evicted.attrs["reason"] == "Evicted" and evicted.pod == "bert-pt-worker-1"
    assert evicted.ts == NOW - 12 * 60_000
    spot = by_kind["spot.interruption", "paste.txt:8"]
    assert (spot.node, spot.instance_id) == ("ip-10-0-1-2.ec2.internal", "i-0abc123def4567890")
    scale = by_kind["k8s.event", "paste.txt:9"]
    assert scale.node == "ip-10-0-9-9.ec2.internal" and scale.attrs["reason"] == "ScaleDown"
    words = [ev.message for ev in _evidence(items) if ev.pod == PASTED_POD]
    prompts = [message for message in words if message.startswith("$")]
    assert prompts == ["$ kubectl get pods -n ml", "$ kubectl get events -n ml"]
    # The pods table's rows are words as well (a STATUS no reader models may name the cause).
    assert any("CrashLoopBackOff" in message for message in words)


DESCRIBE_AND_DMESG = """\
Name:             llama-ft-worker-2
Namespace:        ml-research
Node:             ip-10-0-3-41.ec2.internal/10.0.3.41
Start Time:       Sat, 21 Nov 2026 22:04:11 +0000
Status:           Running
Containers:
  pytorch:
    State:          Running
      Started:      Sun, 22 Nov 2026 03:19:55 +0000
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
      Started:      Sat, 21 Nov 2026 22:04:30 +0000
      Finished:     Sun, 22 Nov 2026 03:19:40 +0000
    Restart Count:  1
Events:           <none>

[Sun Nov 22 03:19:29 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus.
"""


def test_describe_pod_and_dmesg_keep_their_own_times_and_node() -> None:
    items = _read(DESCRIBE_AND_DMESG)
    (pod,) = [item for item in items if isinstance(item, PodRecord)]
    assert (pod.namespace, pod.name, pod.node) == (
        "ml-research",
        "llama-ft-worker-2",
        "ip-10-0-3-41.ec2.internal",
    )
    evidence = {ev.kind: ev for ev in _evidence(items)}
    ended = evidence["container.terminated"]
    assert ended.attrs["exit_code"] == 1 and format_ts(ended.ts) == "2026-11-22T03:19:40Z"
    xid = evidence["gpu.xid"]
    assert xid.attrs["xid"] == 79 and format_ts(xid.ts) == "2026-11-22T03:19:29Z"
    assert xid.origin == "paste.txt:18"


def test_colours_cri_prefixes_and_terminal_wrapping_are_undone() -> None:
    cut = "RuntimeError: CUDA error: an illegal memory access was encountered. " + "x" * 200
    head, tail = cut[:120], cut[120:]
    text = (
        "2026-11-22T03:19:31.000000001Z stderr F \x1b[31mTraceback (most recent call last):\x1b[0m\n"
        '  File "/app/train.py", line 9, in <module>\n'
        f"{head}\n{tail}\n"
    )
    errors = [ev for ev in _evidence(_read(text)) if ev.kind == "log.error"]
    assert errors and all("\x1b" not in ev.message for ev in errors)
    assert any(
        ev.message.startswith("RuntimeError") and ev.message.endswith("x" * 200) for ev in errors
    )


def test_a_pasted_pod_document_goes_through_the_json_reader() -> None:
    pod = """{"apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "w-0", "namespace": "ml", "uid": "5f1c0a9e-0000-4000-8000-000000000001"},
      "spec": {"nodeName": "gpu-7"},
      "status": {"phase": "Failed", "containerStatuses": [{"name": "pytorch", "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
          "startedAt": "2026-11-22T01:00:00Z", "finishedAt": "2026-11-22T02:00:00Z"}}}]}}"""
    items = _read(pod)
    assert any(isinstance(item, PodRecord) and item.node == "gpu-7" for item in items)
    (ended,) = [ev for ev in _evidence(items) if ev.kind == "container.terminated"]
    assert ended.attrs["reason"] == "OOMKilled" and ended.attrs["exit_code"] == 137


def _kinds(text: str) -> list[tuple[str, dict[str, object]]]:
    return [(ev.kind, ev.attrs) for ev in _evidence(_read(text))]


def test_describe_fragments_without_a_name_keep_each_state_block_apart() -> None:
    text = (
        "    State:          Waiting\n"
        "      Reason:       CrashLoopBackOff\n"
        "    Last State:     Terminated\n"
        "      Reason:       OOMKilled\n"
        "      Exit Code:    137\n"
    )
    structured = [(k, a) for k, a in _kinds(text) if k.startswith("container.")]
    assert [(k, a["reason"]) for k, a in structured] == [
        ("container.waiting", "CrashLoopBackOff"),
        ("container.terminated", "OOMKilled"),
    ]
    assert structured[1][1]["exit_code"] == 137
    # The lines are words too: nothing a cut kept is lost to the structure.
    words = [ev.message for ev in _evidence(_read(text)) if ev.kind.startswith("log.")]
    assert any("OOMKilled" in message for message in words)


def test_a_pods_own_status_reason_and_message_become_its_status() -> None:
    text = "Status:         Failed\nReason:         Evicted\nMessage:        The node was low on resource: memory.\n"
    (status,) = [ev for ev in _evidence(_read(text)) if ev.kind == "pod.status"]
    assert status.attrs["reason"] == "Evicted" and status.attrs["phase"] == "Failed"
    assert "low on resource" in str(status.attrs["message"])


def test_get_nodes_without_roles_and_squeezed_event_rows_are_read() -> None:
    text = (
        "NAME           STATUS     AGE       VERSION\n"
        "gpu-node-7     NotReady   18h       v1.7.0\n"
        "\n"
        "18m Normal RebootScheduled node/aks-gpu-10919361-vmss000000 Node condition RebootScheduled is now: True\n"
    )
    evidence = _evidence(_read(text))
    (condition,) = [ev for ev in evidence if ev.kind == "node.condition"]
    assert condition.node == "gpu-node-7" and condition.attrs["status"] == "Unknown"
    (event,) = [ev for ev in evidence if ev.kind == "k8s.event"]
    assert (
        event.attrs["reason"] == "RebootScheduled" and event.node == "aks-gpu-10919361-vmss000000"
    )


def test_a_controller_line_no_notice_is_read_from_stays_a_log_line() -> None:
    text = (
        '{"level":"ERROR","time":"2023-11-13T02:23:56.464Z","logger":"controller.provisioner",'
        '"message":"Could not schedule pod, incompatible with nodepool \\"default\\"","commit":"1072d3b"}\n'
    )
    (line,) = _evidence(_read(text))
    assert line.kind.startswith("log.") and "Could not schedule pod" in line.message


def test_the_kind_of_a_structured_controller_line_is_read_from_its_fields() -> None:
    karpenter = (
        '{"level":"INFO","time":"2024-01-29T08:47:30.575Z","logger":"controller.interruption",'
        '"message":"initiating delete from interruption message","messageKind":"SpotInterruptionKind",'
        '"nodeclaim":"default-4w54b","action":"CordonAndDrain","node":"ip-10-0-36-60.eu-west-2.compute.internal"}'
    )
    nth = (
        '{"event":{"EventID":"instance-event-0c6a","Kind":"SCHEDULED_EVENT","Description":"instance-stop will occur '
        "between 28 Dec 2020 06:00:00 GMT and 28 Dec 2020 08:00:00 GMT because The instance is running on degraded "
        'hardware\\n","NodeName":"ip-10-0-2-3.ec2.internal"},"time":"2020-12-10T01:50:29Z",'
        '"message":"Adding new event to the event store"}'
    )
    (spot,) = _evidence(_read(karpenter))
    assert (
        spot.kind == "spot.interruption" and spot.node == "ip-10-0-36-60.eu-west-2.compute.internal"
    )
    (scheduled,) = _evidence(_read(nth))
    assert scheduled.kind == "maintenance.scheduled"


def test_launcher_prefixes_are_cut_so_the_traceback_reads_whole() -> None:
    text = (
        "\n".join(
            f"{rank}: [rank{rank}]: {line}"
            for rank in (3, 3, 3)
            for line in ["Traceback (most recent call last):"]
        )
        + '\n3: [rank3]:   File "train.py", line 4, in <module>\n3: [rank3]: AssertionError: num_layers should be divisible by pipeline_model_parallel_size\n'
    )
    tracebacks = [ev for ev in _evidence(_read(text)) if ev.kind == "log.traceback"]
    assert any(tb.attrs["exception"] == "AssertionError" for tb in tracebacks)


def test_lines_wrapped_at_a_width_the_paste_shares_are_joined_and_long_ones_left_alone() -> None:
    wrapped = "x" * 70 + "ran for 600"
    first = (
        "[rank4]:[E210 02:06:33] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
        + "y" * 7
    )
    # Three lines share one width: a terminal cut there, once for one line, twice for another.
    text = f"{first}\n{'z' * len(first)}\nOpType=ALLREDUCE)\n{first}\nran for 600045\n{wrapped}\n"
    messages = [ev.message for ev in _evidence(_read(text))]
    assert messages[:2] == [
        first + "z" * len(first) + "OpType=ALLREDUCE)",
        first + "ran for 600045",
    ]
    assert wrapped in messages  # a merely long line stays as it was


def test_two_lines_of_one_length_are_a_coincidence_not_a_wrap() -> None:
    one = "Epoch 1: train_perplexity=1.2784, train_epoch_loss=0.2456, epoch time 27.7s"
    two = "eval_ppl=1.3011, eval_epoch_loss=0.2632, best eval loss on epoch 1 is 0.263"
    assert len(one) == len(two)
    text = f"{one}\nmax training steps reached\n{two}\nsaved\n"
    messages = [ev.message for ev in _evidence(_read(text))]
    assert messages == [one, "max training steps reached", two, "saved"]


def test_progress_rows_of_one_width_are_whole_lines_not_wraps() -> None:
    # A trainer's fixed-format rows share widths by chance; each is followed by the next row,
    # so none was cut, and the scheduler's line after the last row stays a line of its own.
    rows = [
        f"tick {n}  kimg {n * 50}.8   sec/tick 306.{n % 10}   maintenance 0.0   gpumem 11.94"
        for n in range(10, 14)
    ]
    assert len({len(row) for row in rows}) == 1
    end = "slurmstepd: error: *** JOB 3658512 ON node030 CANCELLED AT 2024-10-21T17:00:20 DUE TO TIME LIMIT ***"
    messages = [ev.message for ev in _evidence(_read("\n".join([*rows, end]) + "\n"))]
    assert messages[-len(rows) - 1 :] == [*rows, end]


def test_a_program_s_error_line_is_never_the_rest_of_a_cut_one() -> None:
    row = "tick 13  kimg 650.8   time 6d 23h 13m   sec/tick 306.3   maintenance 0.0   cpumem 5.12"
    row = row.ljust(100, " ")[:99] + "9"  # exactly a terminal's width
    end = "slurmstepd: error: *** JOB 3658512 ON node030 CANCELLED AT 2024-10-21T17:00:20 DUE TO TIME LIMIT ***"
    messages = [ev.message for ev in _evidence(_read(f"{row}\n{end}\n"))]
    assert messages[-1] == end


def test_only_a_wrapped_token_rejoins_a_status_document() -> None:
    text = (
        "status:\n"
        "  containerStatuses:\n"
        "  - containerID:\n"
        "docker://2bb40ef4a935253f438e8e8c2d27c04e4698e9e68405f2eb26c9e0f1e49a0076\n"
        "    name: trainer\n"
        "    state:\n"
        "      terminated:\n"
        "        exitCode: 137\n"
        "# the kill I am asking about\n"
        "        reason: Error\n"
        "  phase: Failed\n"
        "model:\n"
        "  seq_len: 4096\n"
        "Segmentation fault (core dumped)\n"
        "  micro_batch: 4\n"
    )
    items = _evidence(_read(text))
    (ended,) = [ev for ev in items if ev.kind == "container.terminated"]
    assert (ended.container, ended.attrs["exit_code"]) == ("trainer", 137)
    assert "Segmentation fault (core dumped)" in [ev.message for ev in items]


def test_rule_lines_and_repeated_log_lines_are_not_wrapped_text() -> None:
    rule = "-" * 75
    header = "ValueError" + " " * 32 + "Traceback (most recent call last)"
    fuse = "fuse: 2020/06/18 21:07:50.890584 *fuseops.ReadFileOp error: fh.reader.ReadAt: readFull"
    text = f"{rule}\n{header}\n{fuse}\n{fuse}\n"
    messages = [ev.message for ev in _evidence(_read(text)) if ev.kind.startswith("log.")]
    assert messages.count(fuse) == 2
    assert any(m == header for m in messages)


def test_srun_labels_are_cut_from_indented_traceback_lines_too() -> None:
    # srun --label puts "N: " before every line, the traceback's indented frames included.
    text = (
        "0: Traceback (most recent call last):\n"
        '0:   File "train.py", line 247, in __iter__\n'
        '0:     assert shm is not None, "SharedMemory objects are None."\n'
        "0: AssertionError: SharedMemory objects are None.\n"
        "srun: error: nid005059: task 0: Exited with exit code 1\n"
    )
    (tb,) = [ev for ev in _evidence(_read(text)) if ev.kind == "log.traceback"]
    assert tb.attrs["exception"] == "AssertionError"
    assert tb.attrs["files"] == ["train.py"]


def test_grep_file_names_and_horovod_prefixes_are_cut() -> None:
    text = (
        "messages:Jun 17 20:18:09 ip-172-31-27-211 kernel: INFO: task python:80601 blocked for more than 120 seconds.\n"
        "messages:Jun 17 20:18:09 ip-172-31-27-211 kernel: nfs: server fs-1 not responding, still trying\n"
    )
    kinds = {ev.kind for ev in _evidence(_read(text))}
    assert {"kernel.hung_task", "kernel.io"} <= kinds
    horovod = (
        "Thu Aug 29 16:41:02 2019[0]<stderr>:Traceback (most recent call last):\n"
        'Thu Aug 29 16:41:02 2019[0]<stderr>:  File "train.py", line 16, in <module>\n'
        "Thu Aug 29 16:41:02 2019[0]<stderr>:KeyError: 'lr'\n"
    )
    (tb,) = [ev for ev in _evidence(_read(horovod)) if ev.kind == "log.traceback"]
    assert tb.attrs["exception"] == "KeyError"
    quoted = '> > File "train.py", line 110, in load_checkpoint\n> >     it = ckpt["iteration"]\n> > KeyError: \'iteration\'\n'
    (tb,) = [ev for ev in _evidence(_read(quoted)) if ev.kind == "log.traceback"]
    assert (tb.attrs["exception"], tb.attrs["functions"]) == ("KeyError", ["load_checkpoint"])


def test_the_cxx_terminate_handler_and_its_what_line_are_one_record() -> None:
    text = (
        "terminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [../gloo/transport/tcp/pair.cc:572] Connection closed by peer [10.1.2.3]:53666\n"
        "Aborted\n"
    )
    messages = [ev.message for ev in _evidence(_read(text))]
    assert messages[0].startswith(
        "terminate called after throwing an instance of 'gloo::IoException' what():"
    )
    assert messages[0].endswith("Connection closed by peer [10.1.2.3]:53666")
    assert messages[1] == "Aborted"
    alone = [
        ev.message
        for ev in _evidence(_read("terminate called after throwing an instance of 'c10::Error'\n"))
    ]
    assert alone == ["terminate called after throwing an instance of 'c10::Error'"]


def test_records_come_back_in_the_order_they_were_pasted() -> None:
    text = (
        "Training completed.\n"
        "    Last State:     Terminated\n"
        "      Reason:       OOMKilled\n"
        "      Exit Code:    137\n"
    )
    lines = [int((ev.origin or ":0").rpartition(":")[2]) for ev in _evidence(_read(text))]
    assert lines == sorted(lines)


def test_status_fragments_are_read_whatever_level_the_paste_cut_them_at() -> None:
    below_status = "status:\n  phase: Failed\n  reason: Evicted\n  message: 'The node was low on resource: memory.'\n"
    (evicted,) = [ev for ev in _evidence(_read(below_status)) if ev.kind == "pod.status"]
    assert evicted.attrs["reason"] == "Evicted"
    yq_terminated = 'exitCode: 137\nfinishedAt: "2025-12-17T10:56:44Z"\nreason: OOMKilled\nstartedAt: "2025-12-17T10:56:35Z"\n'
    (killed,) = [ev for ev in _evidence(_read(yq_terminated)) if ev.kind == "container.terminated"]
    assert (killed.attrs["reason"], killed.attrs["exit_code"]) == ("OOMKilled", 137)
    indented = (
        "    lastState:\n      terminated:\n        exitCode: 139\n        reason: Error\n"
        "    state:\n      waiting:\n        reason: CrashLoopBackOff\n"
    )
    kinds = {ev.kind: ev.attrs for ev in _evidence(_read(indented))}
    assert kinds["container.terminated"]["exit_code"] == 139
    assert kinds["container.waiting"]["reason"] == "CrashLoopBackOff"


def test_a_jobs_status_is_not_taken_for_a_pods() -> None:
    # `kubectl get job -o yaml`'s status (batch/v1 JobStatus): its Complete condition is the
    # Job's, so no stand-in pod is made of it and its lines stay text for the rules.
    text = (
        "status:\n"
        '  completionTime: "2019-07-29T06:45:38Z"\n'
        "  conditions:\n"
        '  - lastProbeTime: "2019-07-29T06:45:38Z"\n'
        '    lastTransitionTime: "2019-07-29T06:45:38Z"\n'
        '    status: "True"\n'
        "    type: Complete\n"
        "  succeeded: 1\n"
    )
    evidence = _evidence(_read(text))
    assert {ev.kind for ev in evidence} == {"log.line"}
    assert "    type: Complete" in {ev.message for ev in evidence}
    failed = '- lastTransitionTime: "2024-01-01T00:00:00Z"\n  reason: BackoffLimitExceeded\n  status: "True"\n  type: Failed\n'
    assert {ev.kind for ev in _evidence(_read(failed))} == {"log.line"}


def test_a_bare_list_of_node_conditions_is_about_the_node() -> None:
    text = (
        '- lastHeartbeatTime: "2026-03-04T10:00:00Z"\n'
        '  lastTransitionTime: "2026-03-04T10:02:00Z"\n'
        "  message: Kubelet stopped posting node status.\n"
        "  reason: NodeStatusUnknown\n"
        "  status: Unknown\n"
        "  type: Ready\n"
        '- lastTransitionTime: "2026-03-04T10:02:00Z"\n'
        "  reason: NodeStatusUnknown\n"
        "  status: Unknown\n"
        "  type: MemoryPressure\n"
    )
    conditions = [ev for ev in _evidence(_read(text)) if ev.kind == "node.condition"]
    ready = next(ev for ev in conditions if ev.attrs["condition"] == "Ready")
    assert ready.attrs["status"] == "Unknown" and ready.pod is None


def test_other_shapes_people_paste_are_read_as_what_they_are() -> None:
    old_events = (
        "  FirstSeen\tLastSeen\tCount\tFrom\t\t\tSubobjectPath\tType\t\tReason\t\tMessage\n"
        "  ---------\t--------\t-----\t----\t\t\t-------------\t--------\t------\t\t-------\n"
        "  1m\t\t1m\t\t1\t{kubelet gpu-node-3}\t\t\tWarning\t\tEvicted\t\tThe node was low on resource: memory.\n"
    )
    (event,) = _evidence(_read(old_events))
    assert (event.kind, event.attrs["reason"], event.attrs["type"]) == (
        "k8s.event",
        "Evicted",
        "Warning",
    )
    pretty = (
        '{\n  "level": "INFO",\n  "time": "2024-05-02T10:11:12.000Z",\n  "logger": "controller",\n'
        '  "message": "initiating delete from interruption message",\n  "messageKind": "spot_interrupted",\n'
        '  "Node": {"name": "ip-10-0-1-2.ec2.internal"}\n}\n'
    )
    (spot,) = _evidence(_read(pretty))
    assert spot.kind == "spot.interruption" and spot.node == "ip-10-0-1-2.ec2.internal"
    wrapped = (
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
    )
    (fault,) = _evidence(_read(wrapped))
    assert fault.kind == "kernel.hw" and "fallen off the bus" in fault.message


def test_a_double_spaced_paste_reads_as_it_was_printed() -> None:
    # Copied from a page that puts a blank line after every line: the describe block is one
    # block again, so every taint is read, not just the first.
    printed = [
        "Name:               gpu-node-1",
        "Roles:              <none>",
        "Taints:             node.kubernetes.io/unreachable:NoExecute",
        "                    nvidia.com/gpu=present:NoSchedule",
        "                    node.kubernetes.io/unreachable:NoSchedule",
        "Unschedulable:      false",
    ]
    single = _evidence(_read("\n".join(printed) + "\n"))
    double = _evidence(_read("\n\n".join(printed) + "\n"))
    taints = sorted(e.attrs["key"] for e in double if e.kind == "node.taint")
    assert taints == sorted(e.attrs["key"] for e in single if e.kind == "node.taint")
    assert taints.count("node.kubernetes.io/unreachable") == 2


def test_blank_lines_between_blocks_are_kept() -> None:
    # A paste with its own blank separators is not double-spaced: nothing is closed up; a
    # double-spaced one loses its lone blanks and keeps a run of them (two blocks' separator).
    blocks = list(enumerate(["one", "two", "", "three", "four", "", "five", "six"], 1))
    assert _undouble(blocks) == blocks
    spaced = list(enumerate(["one", "", "two", "", "three", "", "", "four", "", "five"], 1))
    assert [t for _, t in _undouble(spaced)] == ["one", "two", "three", "", "", "four", "five"]


def test_a_condition_whose_type_is_not_a_name_is_no_condition() -> None:
    # Found by the fuzzer: a mutated condition with a list for its type reached a set lookup.
    items = _read('{"type": ["Ready"], "status": "False", "reason": "KubeletNotReady"}\n')
    assert not [e for e in _evidence(items) if e.kind == "node.condition"]


def test_the_block_layers_device_offline_error_is_storage() -> None:
    # blk_errors[]: "device offline" is the block device gone under a writer (a Longhorn or
    # iSCSI volume dropping), printed like the I/O error beside it.
    text = (
        "Jun 20 09:10:16 node13 kernel: device offline error, dev sdf, sector 1005856 "
        "op 0x1:(WRITE) flags 0x0 phys_seg 67 prio class 0\n"
    )
    io = [e for e in _evidence(_read(text)) if e.kind == "kernel.io"]
    assert [e.attrs["device"] for e in io] == ["sdf"]


def test_network_block_storage_losing_its_target_is_storage() -> None:
    # iSCSI's session given up and SCSI refusing I/O to the dropped device; NVMe multipath
    # with no path left; each with a syslog prefix, a dmesg stamp or no time at all.
    text = (
        "May 14 03:14:41 gpu017 kernel:  session1: session recovery timed out after 120 secs\n"
        "May 14 03:14:41 gpu017 kernel: sd 2:0:0:1: rejecting I/O to offline device\n"
        "scsi 2:0:0:2: rejecting I/O to offline device\n"
        "[Tue May 14 03:22:42 2024] block nvme1n1: no available path - failing I/O\n"
        "nvme nvme1: Failed reconnect attempt 10\n"
    )
    items = _evidence(_read(text))
    io = [(e.attrs["device"], e.attrs["detail"]) for e in items if e.kind == "kernel.io"]
    assert io == [
        ("session1", "iSCSI session lost"),
        ("2:0:0:1", "device offline"),
        ("2:0:0:2", "device offline"),
        ("nvme1n1", "no path left"),
    ]
    # Not an I/O error of its own: a kernel line the storage rules read by its words.
    assert [e.kind for e in items if "reconnect" in e.message] == ["kernel.line"]


def test_a_prompt_ends_a_describe_block_even_double_spaced() -> None:
    printed = [
        "$ kubectl describe pod train-0",
        "Name:         train-0",
        "Namespace:    ml",
        "Status:       Running",
        "Events:",
        "  Type    Reason   Age  From     Message",
        "  ----    ------   ---  ----     -------",
        "  Normal  Started  5m   kubelet  Started container pytorch",
        "$ kubectl logs train-0",
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "KeyError: 'labels'",
    ]
    for text in ("\n".join(printed), "\n\n".join(printed)):
        kinds = [e.kind for e in _evidence(_read(text + "\n"))]
        assert "log.traceback" in kinds, kinds


def test_only_a_pasted_logs_last_lines_are_marked_closing() -> None:
    # The words a finished run closes with mean an end only where the paste ends; blank lines
    # at the end are no lines of the log.
    text = "step 1 loss 2.0\nstep 2 loss 1.9\nsaving model\nTest accuracy: 0.91\nDone\n\n\n"
    lines = {e.message: e.attrs.get("closing") for e in _evidence(_read(text))}
    assert lines == {
        "step 1 loss 2.0": None,
        "step 2 loss 1.9": None,
        "saving model": 3,
        "Test accuracy: 0.91": 2,
        "Done": 1,
    }


def test_a_pod_kubectl_shows_as_unknown_lost_its_node() -> None:
    # kubectl prints Unknown for a pod being deleted whose reason is NodeLost: not words.
    text = (
        "NAME               READY   STATUS    RESTARTS   AGE   IP           NODE\n"
        "trainer-worker-1   1/1     Unknown   0          2d    10.244.3.8   gpu-node-3\n"
        "trainer-worker-2   1/1     Running   0          2d    10.244.4.2   gpu-node-4\n"
    )
    lost = [e for e in _evidence(_read(text)) if e.kind == "pod.status"]
    assert [(e.pod, e.node, e.attrs["reason"]) for e in lost] == [
        ("trainer-worker-1", "gpu-node-3", "NodeLost")
    ]


def test_words_a_training_step_follows_are_not_closing() -> None:
    # A periodic save before one more step's loss line is routine; an evaluation's line is no
    # training step, so the results printed after it still close the log.
    saved = "Saving model checkpoint to out/checkpoint-500\n{'loss': 0.81, 'epoch': 0.61}\n"
    assert not any(e.attrs.get("closing") for e in _evidence(_read(saved)))
    tested = "Epoch 9 step 900 loss 0.12\nTest: [196/196] Loss 1.20\n * Acc@1 66.902\n"
    marked = [e.message for e in _evidence(_read(tested)) if e.attrs.get("closing")]
    assert marked == ["Test: [196/196] Loss 1.20", " * Acc@1 66.902"]
    # A line that calls itself final is the run's closing word, whatever step it names.
    final = (
        "Step  6000, Loss: 0.210986\nTarget loss of 0.1 achieved at step 6034! Final Loss: 0.0883\n"
    )
    marked = [e.message for e in _evidence(_read(final)) if e.attrs.get("closing")]
    assert marked == ["Target loss of 0.1 achieved at step 6034! Final Loss: 0.0883"]
    # Weights & Biases' footer, printed by its exit hook however the run ended, is looked past.
    footer = (
        "Total train time: 247.7501 minutes\n"
        "wandb: Synced 6 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)\n"
        "wandb: Find logs at: ./wandb/run-20241113_231623-lyt9t9bs/logs\n"
    )
    marked = [e.message for e in _evidence(_read(footer)) if e.attrs.get("closing")]
    assert marked == ["Total train time: 247.7501 minutes"]
    # The footer that ends the log is marked 0, after the last words; one that more lines
    # follow is not the end.
    after = [e.message for e in _evidence(_read(footer)) if e.attrs.get("closing") == 0]
    assert after == [line for line in footer.splitlines() if line.startswith("wandb:")]
    more = footer + "Loss:  0.4422837793827057\nEvaluating...\n"
    assert not [e for e in _evidence(_read(more)) if e.attrs.get("closing") == 0]
    # Nor is a footer straight after a training step (a run.finish() that a kill followed).
    stepped = "step 4800 | loss 1.92 | lr 3e-4\n" + footer.split("\n", 1)[1]
    assert not [e for e in _evidence(_read(stepped)) if e.attrs.get("closing") == 0]
    # torchrun's rank prefix before the footer is looked past too.
    ranked = "".join(
        f"[default0]:{line}\n" if line.startswith("wandb:") else f"{line}\n"
        for line in footer.splitlines()
    )
    marked = [e.message for e in _evidence(_read(ranked)) if e.attrs.get("closing")]
    assert marked == ["Total train time: 247.7501 minutes"]


def test_a_launchers_own_line_names_the_worker_that_failed_first() -> None:
    # DeepSpeed's launcher and torch.distributed.launch's CalledProcessError both name the
    # local rank whose process they saw exit, and its code.
    for text, rank, code in (
        (
            "[launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
            "'--local_rank=7'] exits with return code = -9",
            7,
            -9,
        ),
        (
            "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', "
            "'--local_rank=1']' returned non-zero exit status 1.",
            1,
            1,
        ),
    ):
        failed = [e for e in _evidence(_read(text + "\n")) if e.kind == "launcher.failure"]
        assert [(e.attrs.get("local_rank"), e.attrs.get("exit_code")) for e in failed] == [
            (rank, code)
        ]
