"""The simulated cluster: cloud account, GPU nodes with their hardware identities, the experiment.

Everything a parser joins on lives here once (node name ↔ instance id ↔ providerID ↔ GPU UUID ↔
PCI address ↔ ASG / node pool / scale-set instance), so every export that mentions a node
agrees with every other one.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from whyjob.sim.clock import HOUR, SECOND
from whyjob.sim.ids import Ids

__all__ = [
    "Cloud",
    "Condition",
    "Experiment",
    "Gpu",
    "InstanceType",
    "Node",
    "Taint",
    "World",
    "asg_arn",
    "build_cloud",
    "build_experiment",
    "make_node",
]


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    gpu_model: str  # NVML name, as dcgm-exporter's modelName label shows it
    gpu_product: str  # GPU feature discovery label value
    gpu_memory_gib: float  # what torch reports as total capacity
    fb_total_mib: int
    cpu: int
    memory_ki: int
    buses: tuple[tuple[int, int, int], ...]  # (PCI domain, bus, device) per GPU index
    efa: int = 0


_BUSES_P4D = tuple((0, b, d) for b in (0x10, 0x20, 0x90, 0xA0) for d in (0x1C, 0x1D))
_BUSES_P5 = tuple((0, b, 0) for b in (0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA))
_BUSES_A3 = tuple((0, b, 0) for b in (0x04, 0x05, 0x0A, 0x0B, 0x84, 0x85, 0x8A, 0x8B))
_BUSES_A3U = tuple((0, b, 0) for b in (0x8F, 0x90, 0x96, 0x97, 0xC6, 0xC7, 0xCD, 0xCE))
_BUSES_AZ = tuple((d, 0, 0) for d in range(1, 9))

INSTANCE_TYPES: dict[str, tuple[InstanceType, ...]] = {
    "aws": (
        InstanceType(
            "p4d.24xlarge",
            "NVIDIA A100-SXM4-40GB",
            "NVIDIA-A100-SXM4-40GB",
            39.39,
            40960,
            96,
            1176508388,
            _BUSES_P4D,
            efa=4,
        ),
        InstanceType(
            "p5.48xlarge",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA-H100-80GB-HBM3",
            79.11,
            81559,
            192,
            2097152000,
            _BUSES_P5,
            efa=32,
        ),
    ),
    "gce": (
        InstanceType(
            "a3-highgpu-8g",
            "NVIDIA H100 80GB HBM3",
            "nvidia-h100-80gb",
            79.11,
            81559,
            208,
            1948305540,
            _BUSES_A3,
        ),
        InstanceType(
            "a2-ultragpu-8g",
            "NVIDIA A100-SXM4-80GB",
            "nvidia-a100-80gb",
            79.15,
            81920,
            96,
            1394703044,
            _BUSES_P4D,
        ),
    ),
    "gce-ib": (
        InstanceType(
            "a3-ultragpu-8g",
            "NVIDIA H200",
            "nvidia-h200-141gb",
            139.72,
            143771,
            224,
            3029327716,
            _BUSES_A3U,
        ),
    ),
    "azure": (
        InstanceType(
            "Standard_ND96asr_v4",
            "NVIDIA A100-SXM4-40GB",
            "NVIDIA-A100-SXM4-40GB",
            39.39,
            40960,
            96,
            924158020,
            _BUSES_AZ,
        ),
        InstanceType(
            "Standard_ND96isr_H100_v5",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA-H100-80GB-HBM3",
            79.11,
            81559,
            96,
            1899823656,
            _BUSES_AZ,
        ),
    ),
}

_CPU_TYPES = {"aws": "m6i.4xlarge", "gce": "n2-standard-16", "azure": "Standard_D16s_v5"}


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    domain: int
    bus: int
    device: int
    serial: str

    @property
    def pci(self) -> str:
        """The kernel's spelling in Xid lines: `0000:53:00`."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"

    @property
    def pci_bus_id(self) -> str:
        """NVML / dcgm-exporter spelling: `00000000:53:00.0`."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.0"

    @property
    def nccl_bus_id(self) -> str:
        """NCCL's `busId` in init lines: `53000`."""
        prefix = f"{self.domain:x}" if self.domain else ""
        return f"{prefix}{self.bus:x}{self.device:02x}0"


@dataclass(slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: int
    last_heartbeat: int


@dataclass(slots=True)
class Taint:
    key: str
    effect: str
    time_added: int | None = None
    value: str | None = None


@dataclass(slots=True)
class Cloud:
    kind: str  # aws | gce | azure
    region: str
    zones: tuple[str, ...]
    cluster: str
    account: str = ""  # AWS account id
    project: str = ""  # GCE project
    subscription: str = ""  # Azure subscription id
    resource_group: str = ""  # Azure node resource group (MC_...)
    gce_utc_offset: int = -8  # the API prints operation times in US Pacific time
    control_plane_host: str = ""


@dataclass(slots=True)
class Node:
    name: str
    uid: str
    cloud: str
    zone: str
    region: str
    instance_type: InstanceType | None  # None: a CPU-only node
    instance_type_name: str
    internal_ip: str
    provider_id: str
    instance_id: str  # EC2 id, GCE numeric id, or Azure VMSS instance name
    group: str  # ASG name, GKE node pool, or AKS agent pool
    group_instance: str  # Azure: scale-set instance name (`aks-gpupool-12345678-vmss_3`)
    capacity_type: str  # on-demand | spot
    created_at: int
    boot_at: int
    boot_id: str
    machine_id: str
    system_uuid: str
    kernel_version: str
    os_image: str
    kubelet_version: str
    runtime_version: str
    driver_version: str
    gpus: list[Gpu] = field(default_factory=list)
    noise: bool = False
    karpenter: bool = False
    conditions: dict[str, Condition] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    unschedulable: bool = False
    deleted_at: int | None = None
    boots: list[tuple[int, str]] = field(default_factory=list)  # (boot time, boot id), in order
    extra_labels: dict[str, str] = field(default_factory=dict)
    allocatable_gpus: int | None = None

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpus)

    def gpu(self, index: int) -> Gpu:
        return self.gpus[index]

    def exists_at(self, at: int) -> bool:
        return self.created_at <= at and (self.deleted_at is None or at < self.deleted_at)

    def set_condition(self, at: int, type_: str, status: str, reason: str, message: str) -> None:
        current = self.conditions.get(type_)
        if current is not None and current.status == status and current.reason == reason:
            current.last_heartbeat = at
            return
        self.conditions[type_] = Condition(type_, status, reason, message, at, at)

    def heartbeat(self, at: int) -> None:
        for condition in self.conditions.values():
            if condition.status != "Unknown":
                condition.last_heartbeat = max(condition.last_heartbeat, at)

    def add_taint(self, taint: Taint) -> None:
        if all((t.key, t.effect) != (taint.key, taint.effect) for t in self.taints):
            self.taints.append(taint)

    def remove_taint(self, key: str) -> None:
        self.taints = [t for t in self.taints if t.key != key]

    def reboot(self, at: int, boot_id: str) -> None:
        self.boots.append((at, boot_id))
        self.boot_at = at
        self.boot_id = boot_id


@dataclass(slots=True)
class Experiment:
    name: str
    namespace: str
    launcher: str  # PyTorchJob | JobSet | experiment label
    ranks: int
    container: str
    image: str
    image_digest: str
    framework: str  # hf | megatron | deepspeed
    job_uid: str
    model: str
    script: str
    gpus_per_pod: int = 8
    replicated_job: str = "workers"
    memory_request_gi: int = 0
    memory_limit_gi: int = 0
    cpu_request: int = 0
    ckpt_dir: str = "/ckpt"
    priority_class: str = ""

    @property
    def qos_class(self) -> str:
        return "Guaranteed" if self.memory_request_gi == self.memory_limit_gi else "Burstable"


@dataclass(slots=True)
class World:
    cloud: Cloud
    experiment: Experiment
    nodes: dict[str, Node] = field(default_factory=dict)
    rank_nodes: list[str] = field(default_factory=list)  # node of each rank in the first attempt
    spare_nodes: list[str] = field(default_factory=list)

    def add(self, node: Node) -> Node:
        self.nodes[node.name] = node
        return node

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def nodes_at(self, at: int) -> list[Node]:
        return [n for n in self.nodes.values() if n.exists_at(at)]


# ---------------------------------------------------------------------------------------------
# builders


_REGIONS = {
    "aws": (
        ("us-west-2", ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d")),
        ("us-east-2", ("us-east-2a", "us-east-2b", "us-east-2c")),
    ),
    "gce": (
        ("us-central1", ("us-central1-a", "us-central1-b", "us-central1-c")),
        ("us-east5", ("us-east5-a", "us-east5-b")),
    ),
    "azure": (
        ("eastus", ("eastus-1", "eastus-2", "eastus-3")),
        ("southcentralus", ("southcentralus-1", "southcentralus-2")),
    ),
}


def _us_pacific_offset(at: int) -> int:
    """-7 during US daylight saving time (second Sunday of March to first Sunday of November)."""
    moment = datetime.fromtimestamp(at / SECOND, UTC)
    year = moment.year

    def nth_sunday(month: int, nth: int) -> datetime:
        first = datetime(year, month, 1, 10, tzinfo=UTC)
        shift = (6 - first.weekday()) % 7
        return first.replace(day=1 + shift + 7 * (nth - 1))

    return -7 if nth_sunday(3, 2) <= moment < nth_sunday(11, 1) else -8


def build_cloud(kind: str, rng: random.Random, ids: Ids, t0: int) -> Cloud:
    region, zones = rng.choice(_REGIONS[kind])
    cluster = rng.choice(("train", "ml-prod", "research", "gpu-main"))
    if kind == "aws":
        return Cloud(
            kind,
            region,
            zones,
            f"{cluster}-{region.split('-')[1]}",
            account=ids.digits(12),
            control_plane_host=f"ip-172-16-{rng.randint(0, 255)}-"
            f"{rng.randint(1, 254)}.{region}.compute.internal",
        )
    if kind == "gce":
        project = f"{rng.choice(('ml-training', 'research-gpu', 'llm-infra'))}-{ids.digits(4)}"
        return Cloud(
            kind,
            region,
            zones,
            cluster,
            project=project,
            gce_utc_offset=_us_pacific_offset(t0),
            control_plane_host=f"gke-{ids.hex(16)}-{ids.hex(4)}-vm",
        )
    rg_cluster = f"aks-{cluster}"
    return Cloud(
        kind,
        region,
        zones,
        rg_cluster,
        subscription=ids.uid(),
        resource_group=f"MC_ml-{cluster}-rg_{rg_cluster}_{region}",
        control_plane_host=f"kube-scheduler-{ids.k8s_suffix(10)}",
    )


_MODELS = (
    "gpt2-xl",
    "llama3-8b",
    "llama2-13b",
    "mistral-7b",
    "qwen2-7b",
    "olmo-7b",
    "t5-3b",
    "falcon-7b",
    "pythia-6.9b",
    "bloom-3b",
)
_SUFFIXES = ("run{n}", "sft-v{n}", "pretrain-{n:02d}", "lr3e4-{n}", "ablation-{n}", "dpo-{n}")
_NAMESPACES = ("ml-research", "nlp-team", "foundation-models", "team-llm", "research-ft")


def build_experiment(
    rng: random.Random, ids: Ids, cloud: Cloud, *, ranks: int, launcher: str, framework: str
) -> Experiment:
    model = rng.choice(_MODELS)
    name = f"{model}-{rng.choice(_SUFFIXES).format(n=rng.randint(1, 40))}".replace(".", "-")
    namespace = rng.choice(_NAMESPACES)
    tag = f"2026.{rng.randint(1, 3):02d}.{rng.randint(0, 9)}-cu124"
    if cloud.kind == "aws":
        repo = f"{cloud.account}.dkr.ecr.{cloud.region}.amazonaws.com/{namespace}/trainer"
    elif cloud.kind == "gce":
        repo = f"{cloud.region}-docker.pkg.dev/{cloud.project}/ml/trainer"
    else:
        repo = f"mltrain{ids.alnum(6)}.azurecr.io/{namespace}/trainer"
    memory_limit = rng.choice((640, 800, 960, 1024))
    memory_request = memory_limit if rng.random() < 0.4 else memory_limit // 2
    container = {"PyTorchJob": "pytorch", "JobSet": "trainer"}.get(launcher, "trainer")
    script = {"hf": "train.py", "deepspeed": "train.py", "megatron": "pretrain_gpt.py"}[framework]
    return Experiment(
        name=name,
        namespace=namespace,
        launcher=launcher,
        ranks=ranks,
        container=container,
        image=f"{repo}:{tag}",
        image_digest=f"{repo}@{ids.sha256()}",
        framework=framework,
        job_uid=ids.uid(),
        model=model,
        script=script,
        memory_request_gi=memory_request,
        memory_limit_gi=memory_limit,
        cpu_request=rng.choice((48, 64, 80)),
    )


def _base36(number: int, width: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rem = divmod(number, 36)
        out = digits[rem] + out
    return out.rjust(width, "0")


@dataclass(slots=True)
class Pool:
    """A node group: one ASG / GKE node pool / AKS agent pool of one instance type."""

    name: str
    group: str  # ASG name, GKE instance-group hash, or AKS vmss name
    instance_type: InstanceType | None
    capacity_type: str
    next_index: int = 0
    karpenter: bool = False


def make_pool(
    cloud: Cloud,
    rng: random.Random,
    ids: Ids,
    *,
    gpu: bool,
    spot: bool = False,
    ib: bool = False,
    karpenter: bool = False,
    suffix: str = "",
) -> Pool:
    if gpu:
        key = "gce-ib" if (ib and cloud.kind == "gce") else cloud.kind
        itype: InstanceType | None = rng.choice(INSTANCE_TYPES[key])
        if ib and cloud.kind == "azure":
            itype = INSTANCE_TYPES["azure"][1]
    else:
        itype = None
    capacity = "spot" if spot else "on-demand"
    if cloud.kind == "aws":
        short = (itype.name.split(".")[0] if itype else "cpu") + ("-spot" if spot else "")
        name = (f"gpu-{short}" if itype else f"system-{short}") + suffix
        return Pool(name, f"eks-{name}-{ids.uid()}", itype, capacity, karpenter=karpenter)
    if cloud.kind == "gce":
        short = (itype.name.split("-")[0] if itype else "cpu") + ("-spot" if spot else "")
        name = f"{short}-pool{suffix}"
        return Pool(name, ids.hex(8), itype, capacity)
    name = ("gpupool" if itype else "syspool") + ("spot" if spot else "")
    name = name[:11] + suffix
    return Pool(name, f"aks-{name}-{ids.digits(8)}-vmss", itype, capacity)


def make_node(
    cloud: Cloud,
    pool: Pool,
    rng: random.Random,
    ids: Ids,
    *,
    created_at: int,
    noise: bool = False,
) -> Node:
    """One node of `pool`, with every identity its cloud gives it."""
    itype = pool.instance_type
    zone = rng.choice(cloud.zones)
    index = pool.next_index
    pool.next_index += 1 + (rng.randint(0, 3) if cloud.kind == "azure" else 0)
    if cloud.kind == "aws":
        ip = f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        name = f"ip-{ip.replace('.', '-')}.{cloud.region}.compute.internal"
        instance_id = ids.instance_id()
        provider_id = f"aws:///{zone}/{instance_id}"
        group_instance = instance_id
        kernel = rng.choice(("5.10.230-223.885.amzn2.x86_64", "6.1.119-129.201.amzn2023.x86_64"))
        os_image = "Amazon Linux 2" if "amzn2." in kernel else "Amazon Linux 2023.6.20241212"
        kubelet = "v1.30.6-eks-94953ac"
    elif cloud.kind == "gce":
        ip = f"10.128.{rng.randint(0, 63)}.{rng.randint(2, 254)}"
        name = f"gke-{cloud.cluster}-{pool.name}-{pool.group}-{ids.alnum(4)}"
        instance_id = ids.gce_numeric_id()
        provider_id = f"gce://{cloud.project}/{zone}/{name}"
        group_instance = name
        kernel = "6.1.112+"
        os_image = "Container-Optimized OS from Google"
        kubelet = "v1.30.5-gke.1443001"
    else:
        ip = f"10.224.{rng.randint(0, 3)}.{rng.randint(4, 254)}"
        name = f"{pool.group}{_base36(index, 6)}"
        group_instance = f"{pool.group}_{index}"
        instance_id = group_instance
        provider_id = (
            f"azure:///subscriptions/{cloud.subscription}/resourceGroups/"
            f"{cloud.resource_group.lower()}/providers/Microsoft.Compute/virtualMachineScaleSets/"
            f"{pool.group}/virtualMachines/{index}"
        )
        kernel = "5.15.0-1075-azure"
        os_image = "Ubuntu 22.04.5 LTS"
        kubelet = "v1.30.6"
    boot_at = created_at - rng.randint(40, 90) * SECOND
    boot_id = ids.boot_id()
    node = Node(
        name=name,
        uid=ids.uid(),
        cloud=cloud.kind,
        zone=zone,
        region=cloud.region,
        instance_type=itype,
        instance_type_name=itype.name if itype else _CPU_TYPES[cloud.kind],
        internal_ip=ip,
        provider_id=provider_id,
        instance_id=instance_id,
        group=pool.group if cloud.kind != "gce" else pool.name,
        group_instance=group_instance,
        capacity_type=pool.capacity_type,
        created_at=created_at,
        boot_at=boot_at,
        boot_id=boot_id,
        machine_id=ids.hex(32),
        system_uuid=ids.uid(),
        kernel_version=kernel,
        os_image=os_image,
        kubelet_version=kubelet,
        runtime_version="containerd://1.7.23",
        driver_version=rng.choice(("535.216.01", "550.127.05", "550.90.07")),
        noise=noise,
        karpenter=pool.karpenter,
    )
    node.boots.append((boot_at, boot_id))
    if itype is not None and cloud.kind == "gce":
        # GKE taints every GPU node so that only pods asking for GPUs land there.
        node.taints.append(Taint("nvidia.com/gpu", "NoSchedule", None, "present"))
    if itype is not None:
        for gpu_index, (domain, bus, device) in enumerate(itype.buses):
            node.gpus.append(Gpu(gpu_index, ids.gpu_uuid(), domain, bus, device, ids.digits(13)))
    for type_, reason, message in (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "KubeletReady", "kubelet is posting ready status"),
    ):
        node.set_condition(
            created_at + 20 * SECOND,
            type_,
            "False" if type_ != "Ready" else "True",
            reason,
            message,
        )
    return node


def asg_arn(cloud: Cloud, group: str) -> str:
    """An Auto Scaling group's ARN; its UUID is derived from the name so every record agrees."""
    group_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{cloud.account}/{group}")
    return (
        f"arn:aws:autoscaling:{cloud.region}:{cloud.account}:autoScalingGroup:{group_id}:"
        f"autoScalingGroupName/{group}"
    )


def random_start(rng: random.Random) -> int:
    """A deterministic incident start in the first half of 2026, UTC."""
    base = datetime(2026, 1, 5, tzinfo=UTC).timestamp()
    return int(base) * SECOND + rng.randint(0, 150) * 24 * HOUR + rng.randint(0, 86399) * SECOND
