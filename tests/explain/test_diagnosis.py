"""`whyjob diagnose`'s engine: one pod's cause from a paste, the root rather than the last line."""

from __future__ import annotations

from pathlib import Path

import pytest

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.paste import read_paste
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.explain.diagnosis import Diagnosis, diagnose
from whyjob.explain.ruleset import RuleSet, load_rules

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
NOW = 1_795_400_000_000


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules([])


def _diagnose(text: str, rules: RuleSet) -> Diagnosis:
    items = list(read_paste("paste.txt", text.encode(), IngestOptions(at=NOW)))
    records = [item for item in items if isinstance(item, Evidence)]
    pods = [item for item in items if isinstance(item, PodRecord)]
    return diagnose(records, pods, rules, undated=NOW)


def test_the_xid_that_broke_cuda_is_proven_and_shown_at_its_own_time(rules: RuleSet) -> None:
    found = _diagnose((EXAMPLES / "xid-paste.txt").read_text(), rules)
    assert (found.category, found.grade) == ("gpu.xid", "proven")
    assert found.pod == "ml-research/llama-ft-worker-2"
    # Matching ran in paste order; the summary still shows the line's own clock.
    assert "failed at 2026-11-22T03:19:29Z" in found.summary
    origins = [ev["origin"] for ev in found.evidence]
    assert origins[0] == "paste.txt:37" and "paste.txt:32" in origins
    assert "app.nccl_timeout" in [alt["category"] for alt in found.alternatives]


CASCADE = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train.py", line 214, in <module>
[rank3]:     loss = model(batch)
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 19.68 GiB. GPU 3 has a total capacity of 79.15 GiB of which 11.88 GiB is free.
[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.
E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: -6) local_rank: 0 (pid: 1246013) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_the_first_error_is_the_root_not_the_last_one_printed(rules: RuleSet) -> None:
    found = _diagnose(CASCADE, rules)
    assert found.category == "app.cuda_oom"
    assert "Tried to allocate 19.68 GiB" in found.summary


def test_a_symptom_alone_says_it_is_one_and_what_to_paste_next(rules: RuleSet) -> None:
    found = _diagnose(CASCADE.splitlines()[4] + "\n", rules)
    assert found.category == "app.nccl_timeout"
    assert any("another rank or node failed first" in note for note in found.missing)


def test_a_dataloader_worker_killed_as_the_node_ran_out_of_memory(rules: RuleSet) -> None:
    alone = (EXAMPLES / "dataloader-paste.txt").read_text()
    assert (_diagnose(alone, rules).category, _diagnose(alone, rules).grade) == (
        "container.oom_killed",
        "possible",
    )
    kernel = "[Sat Nov 21 23:41:02 2026] Out of memory: Killed process 4187 (pt_data_worker) total-vm:81231200kB, anon-rss:60345312kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:118544kB oom_score_adj:0\n"
    found = _diagnose(alone + kernel, rules)
    assert (found.category, found.grade) == ("container.oom_killed", "likely")


def test_nothing_recognisable_is_unknown_and_says_what_is_missing(rules: RuleSet) -> None:
    found = _diagnose("step 1200 | loss 2.31 | lr 3e-4\nstep 1210 | loss 2.30\n", rules)
    assert (found.category, found.grade) == ("unknown", "possible")
    assert found.summary.startswith("Read 2 log lines")
    # It asks for what the paste lacked, not for the log it already holds.
    assert "kubectl describe pod" in found.missing[0] and "dmesg" in found.missing[0]
    assert "kubectl logs" not in found.missing[0]


SIDECAR_STATUS = """\
  containerStatuses:
  - containerID:
docker://2bb40ef4a935253f438e8e8c2d27c04e4698e9e68405f2eb26c9e0f1e49a0076
    image: example/trainer:latest
    imageID: docker-pullable://example/trainer@sha256
:f676320917546147d9572f8c94756837138d5d4c872f349d45b20bb345ed991b
    name: main
    state:
      terminated:
        exitCode: 137
        reason: Error
  - containerID:
docker://0742294fe88500a0e450090488cc52d35e781aa7a1533c03e56f47be388102f0
    image: argoproj/argoexec:v2.2.0
    name: wait
    state:
      terminated:
        exitCode: 0
        reason: Completed
  phase: Failed
"""


def test_a_sidecar_that_exited_0_is_not_the_run_that_was_killed(rules: RuleSet) -> None:
    # Values a bug tracker wrapped to the left margin are put back, so both containers read;
    # the run is the container that failed, not Argo's `wait` that exited 0 after it.
    found = _diagnose(SIDECAR_STATUS, rules)
    assert (found.category, found.grade) == ("unknown", "possible")
    assert "exit code 137" in found.summary
    assert any("main terminated" in ev["text"] for ev in found.evidence)


TWO_CONTAINERS = """\
Name:             train-worker-0
Namespace:        ml
Node:             gpu-node-7/10.0.3.17
Status:           Failed
Containers:
  trainer:
    State:          Terminated
      Reason:       OOMKilled
      Exit Code:    137
      Started:      Tue, 14 May 2024 10:02:15 +0000
      Finished:     Tue, 14 May 2024 11:40:02 +0000
  vector:
    State:          Terminated
      Reason:       Error
      Exit Code:    143
      Started:      Tue, 14 May 2024 10:02:15 +0000
      Finished:     Tue, 14 May 2024 11:40:05 +0000
Events:             <none>
"""


def test_the_run_is_the_container_that_failed_first_not_a_sidecar_stopped_after(
    rules: RuleSet,
) -> None:
    # The log shipper was stopped with SIGTERM three seconds after the trainer's OOM kill.
    found = _diagnose(TWO_CONTAINERS, rules)
    assert (found.category, found.grade) == ("container.oom_killed", "proven")
    assert "trainer" in found.summary


def test_a_system_pod_in_a_pods_listing_does_not_take_the_jobs_place(rules: RuleSet) -> None:
    # `get pods -A` after a node loss: the training pod finished; a DaemonSet's pod on the lost
    # node shows Unknown. The paste is about the job.
    text = (
        "NAMESPACE     NAME              READY   STATUS      RESTARTS   AGE\n"
        "ml            trainer-0         0/1     Completed   0          3h\n"
        "kube-system   fluentd-abcde     1/1     Unknown     0          9d\n"
    )
    found = _diagnose(text, rules)
    assert (found.pod, found.category) == ("ml/trainer-0", "job.completed"), found.summary


def test_closing_words_do_not_finish_a_log_that_ends_in_a_kill(rules: RuleSet) -> None:
    ended = (
        "Epoch 3 step 1000 loss 0.4\nSaved model checkpoint to out/final\nBest Epoch 3 acc 0.9\n"
    )
    assert _diagnose(ended, rules).category == "job.completed"
    for last in ("Killed", "srun: error: node12: task 0: Killed", "Terminated"):
        found = _diagnose(ended + last + "\n", rules)
        assert found.category != "job.completed", (last, found.summary)


def test_events_about_the_jobs_volume_claim_are_the_pods(rules: RuleSet) -> None:
    # A `get events` paste that only speaks of the pod's claim: its provisioning failure is
    # why the pod never started, though no event names the pod.
    text = (
        "LAST SEEN   TYPE      REASON               OBJECT                              MESSAGE\n"
        "52s         Warning   ProvisioningFailed   persistentvolumeclaim/data-train-0   "
        'failed to provision volume with StorageClass "shsmb": rpc error: code = '
        "DeadlineExceeded desc = context deadline exceeded\n"
    )
    found = _diagnose(text, rules)
    assert found.category == "startup.config", found.summary
    assert "failed to provision volume" in found.summary


def test_another_workloads_event_is_not_the_pods(rules: RuleSet) -> None:
    # A namespace's events: another ReplicaSet's quota refusal is not why train-0 (which
    # started) stopped.
    text = (
        "LAST SEEN   TYPE      REASON         OBJECT                      MESSAGE\n"
        "12m         Normal    Started        pod/train-0                 Started container trainer\n"
        "3m          Warning   BackOff        pod/train-0                 Back-off restarting failed container trainer\n"
        '2m          Warning   FailedCreate   replicaset/notebook-7d9f8   Error creating: pods "notebook-7d9f8-x2k" '
        "is forbidden: exceeded quota: gpu-quota\n"
        "1m          Warning   ProvisioningFailed   persistentvolumeclaim/data-other-0   "
        'failed to provision volume with StorageClass "shsmb"\n'
    )
    found = _diagnose(text, rules)
    assert found.category != "startup.config", found.summary
    assert "quota" not in found.summary and "provision" not in found.summary


def test_a_paste_counts_a_failure_before_the_finish_in_lines(rules: RuleSet) -> None:
    # An NFS soft mount timing out early in a run that trained on and finished is an error it
    # survived; the same error just before the finish line is what ended it.
    steps = "".join(f"epoch 24 step {n} loss 0.41\n" for n in range(100, 140))
    stall = "[ 3249.562824] nfs: server fs01 not responding, timed out\n"
    finished = "Training complete in 6h 27m\n"
    assert _diagnose(stall + steps + finished, rules).category == "job.completed"
    assert _diagnose(steps + stall + finished, rules).category == "storage.io"


def test_a_summary_names_the_pasted_node_once_as_the_pods(rules: RuleSet) -> None:
    found = _diagnose(
        "[12345.678] watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [python:4567]\n", rules
    )
    assert found.category == "node.not_ready"
    assert "the pod's node failed" in found.summary.lower()
    assert "the the" not in found.summary.lower()
