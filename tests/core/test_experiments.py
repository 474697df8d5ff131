from __future__ import annotations

from whyjob.core.experiments import Launcher, recognise


def test_pytorchjob_labels_name_experiment_and_rank() -> None:
    member = recognise(
        "gpt2-run7-worker-3",
        {
            "training.kubeflow.org/job-name": "gpt2-run7",
            "training.kubeflow.org/replica-type": "Worker",
            "training.kubeflow.org/replica-index": "3",
        },
    )
    assert member is not None
    assert (member.experiment, member.launcher, member.rank) == (
        "gpt2-run7",
        "PyTorchJob",
        "worker-3",
    )


def test_jobset_beats_the_child_job_label_and_reads_the_restart_attempt() -> None:
    member = recognise(
        "llama-trainer-0-1-abcde",
        {
            "batch.kubernetes.io/job-name": "llama-trainer-0",
            "jobset.sigs.k8s.io/jobset-name": "llama",
            "jobset.sigs.k8s.io/replicatedjob-name": "trainer",
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": "1",
            "jobset.sigs.k8s.io/restart-attempt": "2",
        },
    )
    assert member is not None
    assert (member.experiment, member.launcher, member.rank, member.job_attempt) == (
        "llama",
        "JobSet",
        "trainer-0-1",
        2,
    )


def test_plain_label_wins_and_rank_falls_back_to_the_pod_name() -> None:
    member = recognise("sweep-lr-3", {"experiment": "sweep-lr", "job-name": "sweep-lr-3"})
    assert member is not None
    assert (member.experiment, member.label, member.rank) == ("sweep-lr", "experiment", "3")


def test_volcano_ray_and_batch_job() -> None:
    volcano = recognise(
        "mnist-worker-1",
        {"volcano.sh/job-name": "mnist", "volcano.sh/task-spec": "worker"},
        {"volcano.sh/task-index": "1"},
    )
    ray = recognise("rc-worker-gpu-x7k2p", {"ray.io/cluster": "rc", "ray.io/node-type": "worker"})
    job = recognise(
        "bench-0-xyz12",
        {"batch.kubernetes.io/job-name": "bench", "batch.kubernetes.io/job-completion-index": "0"},
    )
    assert volcano and (volcano.experiment, volcano.rank) == ("mnist", "worker-1")
    assert ray and (ray.experiment, ray.launcher, ray.rank) == ("rc", "RayCluster", "worker")
    assert job and (job.experiment, job.launcher, job.rank) == ("bench", "Job", "0")


def test_unlabelled_pods_belong_to_nothing_and_custom_launchers_come_first() -> None:
    assert recognise("nginx-abc", {"app": "nginx"}) is None
    custom = (Launcher("Team label", "team.example.com/run", ("team.example.com/rank",)),)
    member = recognise(
        "r-0", {"team.example.com/run": "r", "team.example.com/rank": "0"}, launchers=custom
    )
    assert member is not None and (member.experiment, member.rank) == ("r", "0")
