"""Per-GPU datasheet figures for the serving-cost model, each with where it came from.

Why a table with sources: the roofline's bandwidth, peak and all-reduce figures decide every serving-cost
answer, so each one names the datasheet (or the measurement) it was read from, and says so where a figure is
derived or recalled rather than read. Stdlib only: this sits on the metadata path (no numpy, no torch).

Conventions, per GPU:

- ``memory_bytes``: the datasheet's capacity with GB read as 1e9 bytes (a little under what the part holds,
  never over it).
- ``bandwidth_bytes_s``: HBM / GDDR bandwidth from the datasheet.
- ``bf16_flops_s`` / ``fp8_flops_s``: DENSE tensor-core peaks. NVIDIA's datasheets print the 2:4-sparsity
  figure with an asterisk; the dense one is half of it. ``fp8_flops_s`` is None on parts without FP8.
  GeForce cards are given at FP32 accumulation (what the serving engines' BF16/FP8 GEMMs use), which on
  those cards runs at half the FP16-accumulate rate their marketing quotes.
- ``link`` / ``link_bytes_s``: the GPU-to-GPU path as the part is normally deployed in an 8-GPU server, and
  its raw per-GPU bandwidth in ONE direction (NVIDIA quotes both directions added: 900 GB/s -> 450e9).
"""

from __future__ import annotations

from dataclasses import dataclass

from eaglelab.errors import ParameterError

#: The link kinds a :class:`Gpu` may name. ``nvlink-c2c`` (Grace-to-GPU) is a CPU link: no GPU below carries
#: its all-reduce over it, GB200's GPUs reduce over NVLink 5 through the NVLink switches.
LINK_KINDS = ("nvlink", "pcie", "xgmi", "nvlink-c2c")

# Datasheets, named once.
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_L40S = "https://www.nvidia.com/en-us/data-center/l40s/"
_L4 = "https://www.nvidia.com/en-us/data-center/l4/"
_BLACKWELL = "https://resources.nvidia.com/en-us-blackwell-architecture/datasheet"
_RTX_PRO = "https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/"
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_AMPERE_GA102 = "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
_MI300X = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
_MI325X = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html"
_MI355X = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"
_XGMI_BLOG = "https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/README.html"


@dataclass(frozen=True)
class Gpu:
    """One GPU's datasheet figures (per GPU, not per server) and where each came from.

    Args:
        name: the product name.
        memory_bytes: device memory, datasheet GB x 1e9.
        bandwidth_bytes_s: device-memory bandwidth (bytes/s).
        bf16_flops_s: dense BF16 tensor-core peak (FLOP/s).
        fp8_flops_s: dense FP8 tensor-core peak (FLOP/s); None where the part has no FP8 tensor cores.
        link: one of :data:`LINK_KINDS`, the GPU-to-GPU path in a normal 8-GPU server.
        link_bytes_s: that link's raw per-GPU bandwidth in one direction (bytes/s).
        source: the datasheet URL(s), and how any figure not printed there was derived.
    """

    name: str
    memory_bytes: float
    bandwidth_bytes_s: float
    bf16_flops_s: float
    fp8_flops_s: float | None
    link: str
    link_bytes_s: float
    source: str


_NVLINK4 = 450e9  # NVLink 4 on H100/H200/H20 SXM: 18 links, 900 GB/s both directions.
_NVLINK5 = 900e9  # NVLink 5 on Blackwell: 1.8 TB/s both directions.
_NVLINK3 = 300e9  # NVLink 3 on A100 SXM: 600 GB/s both directions.
_NVLINK_CN = 200e9  # the China parts H800 / A800: NVLink cut to 400 GB/s both directions.
_PCIE5 = 64e9  # PCIe Gen5 x16: 128 GB/s both directions.
_PCIE4 = 32e9  # PCIe Gen4 x16: 64 GB/s both directions.
_XGMI3 = 7 * 64e9  # MI300X / MI325X: 7 Infinity Fabric links at 64 GB/s one way each (128 GB/s both).
_XGMI4 = 7 * 76.8e9  # MI355X: 7 links, 1075 GB/s both directions in all.

#: Every GPU the serving-cost model knows, keyed by its short name (see :func:`gpu` for the lookup).
GPUS: dict[str, Gpu] = {
    "h100-sxm": Gpu("NVIDIA H100 SXM5 80GB", 80e9, 3.35e12, 989.4e12, 1978.9e12, "nvlink", _NVLINK4,
                    f"{_H100} ; {_H100_PAGE} (BF16 1,979 / FP8 3,958 TFLOPS with sparsity, halved; NVLink 900 GB/s)"),
    "h100-pcie": Gpu("NVIDIA H100 PCIe 80GB", 80e9, 2.0e12, 756.5e12, 1513e12, "pcie", _PCIE5,
                     f"{_H100} (BF16 1,513 / FP8 3,026 TFLOPS with sparsity, halved; HBM2e 2,000 GB/s; PCIe Gen5 "
                     "128 GB/s; its NVLink bridge joins pairs only, so an 8-GPU all-reduce crosses PCIe)"),
    "h100-nvl": Gpu("NVIDIA H100 NVL 94GB", 94e9, 3.9e12, 835.5e12, 1671e12, "pcie", _PCIE5,
                    f"{_H100_PAGE} (H100 NVL column: BF16 1,671 / FP8 3,341 TFLOPS with sparsity, halved; 3.9 TB/s; "
                    "NVLink bridge 600 GB/s pairs only, so an 8-GPU all-reduce crosses PCIe Gen5)"),
    "h800": Gpu("NVIDIA H800 SXM5 80GB", 80e9, 3.35e12, 989.4e12, 1978.9e12, "nvlink", _NVLINK_CN,
                f"{_H100} (compute and memory as H100 SXM; NVLink 400 GB/s both directions, per the brief and "
                "https://github.com/deepseek-ai/DeepSeek-V3/issues/28; no public H800 datasheet read, "
                "datasheet figure recalled, not verified)"),
    "h200": Gpu("NVIDIA H200 SXM 141GB", 141e9, 4.8e12, 989.4e12, 1978.9e12, "nvlink", _NVLINK4,
                f"{_H200} (BF16 1,979 / FP8 3,958 TFLOPS with sparsity, halved; HBM3e 4.8 TB/s; NVLink 900 GB/s)"),
    "h20": Gpu("NVIDIA H20 96GB", 96e9, 4.0e12, 148e12, 296e12, "nvlink", _NVLINK4,
               "no public NVIDIA datasheet; press figures, not verified against NVIDIA: "
               "https://willitrunai.com/es/gpus/h20-96gb (96 GB HBM3, 4.0 TB/s, FP16 148 TFLOPS dense, NVLink 900 GB/s); "
               "FP8 = 2 x BF16 as on every Hopper part"),
    "a100-80g": Gpu("NVIDIA A100 SXM4 80GB", 80e9, 2.039e12, 312e12, None, "nvlink", _NVLINK3,
                    f"{_A100} (BF16 312 TFLOPS dense, 624 with sparsity; HBM2e 2,039 GB/s; NVLink 600 GB/s; no FP8)"),
    "a100-40g": Gpu("NVIDIA A100 SXM4 40GB", 40e9, 1.555e12, 312e12, None, "nvlink", _NVLINK3,
                    f"{_A100} (BF16 312 TFLOPS dense; HBM2 1,555 GB/s; NVLink 600 GB/s; no FP8)"),
    "a800": Gpu("NVIDIA A800 SXM4 80GB", 80e9, 2.039e12, 312e12, None, "nvlink", _NVLINK_CN,
                f"{_A100} (compute and memory as A100 80GB SXM; NVLink cut to 400 GB/s both directions: "
                "datasheet figure recalled, not verified)"),
    "l40s": Gpu("NVIDIA L40S 48GB", 48e9, 864e9, 362.05e12, 733e12, "pcie", _PCIE4,
                f"{_L40S} (datasheet: BF16 362.05 / 733* TFLOPS, FP8 733 / 1,466* (* with sparsity); "
                "GDDR6 864 GB/s; PCIe Gen4 x16 64 GB/s bidirectional; no NVLink)"),
    "l20": Gpu("NVIDIA L20 48GB", 48e9, 864e9, 119.5e12, 239e12, "pcie", _PCIE4,
               "no public NVIDIA datasheet read; memory from https://technical.city/pl/video/L20 (48 GB GDDR6, "
               "864 GB/s, PCIe 4.0 x16); compute derived from the press figure 'L20 is 32% of L40S' "
               "(https://www.taoguba.com.cn/Article/2551318/blog/Article/5364790/1) x L40S dense: recalled, not verified"),
    "l4": Gpu("NVIDIA L4 24GB", 24e9, 300e9, 121e12, 242.5e12, "pcie", _PCIE4,
              f"{_L4} (BF16 242 / FP8 485 TFLOPS with sparsity, halved; GDDR6 300 GB/s; PCIe Gen4 x16 64 GB/s): "
              "datasheet figure recalled, not verified"),
    "rtx-pro-6000": Gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB", 96e9, 1.597e12, 503.8e12, 1007.6e12,
                        "pcie", _PCIE5,
                        f"{_RTX_PRO} (96 GB GDDR7, 1,597 GB/s, PCIe Gen5 x16); compute derived from the datasheet's "
                        "4 PFLOPS FP4 with sparsity: /2 for dense, /2 per doubling of precision (FP8, then BF16 at "
                        "FP32 accumulate): recalled, not verified"),
    "rtx-4090": Gpu("NVIDIA GeForce RTX 4090 24GB", 24e9, 1.008e12, 165.2e12, 330.3e12, "pcie", _PCIE4,
                    f"{_ADA} (appendix table: BF16 165.2 / FP8 330.3 TFLOPS dense at FP32 accumulate, twice that at "
                    "FP16 accumulate; GDDR6X 1,008 GB/s; PCIe Gen4; no NVLink); dense figures cross-checked at "
                    "https://waredb.com/processor/nvidia-geforce-rtx-4090"),
    "rtx-3090": Gpu("NVIDIA GeForce RTX 3090 24GB", 24e9, 936e9, 71e12, None, "pcie", _PCIE4,
                    f"{_AMPERE_GA102} (BF16 71 TFLOPS dense at FP32 accumulate, 142 at FP16 accumulate; GDDR6X "
                    "936 GB/s; PCIe Gen4; its 2-way NVLink bridge does not span 8 GPUs; no FP8): recalled, not verified"),
    "b200": Gpu("NVIDIA B200 (HGX B200) 180GB", 180e9, 7.7e12, 2.25e15, 4.5e15, "nvlink", _NVLINK5,
                f"{_BLACKWELL} (HGX B200 column: FP16/BF16 4.5 / FP8 9 PFLOPS with sparsity, halved; 180 GB HBM3e at "
                "7.7 TB/s; NVLink 5 1.8 TB/s) as quoted at https://zdszero.github.io/Computer/Artificial_Intelligence/"
                "Hardware.html; dense figures match https://glennklockwood.com/garden/processors/B200"),
    "gb200": Gpu("NVIDIA GB200 (one Blackwell GPU of GB200 NVL72) 186GB", 186e9, 8.0e12, 2.5e15, 5.0e15, "nvlink", _NVLINK5,
                 f"{_BLACKWELL} (GB200 NVL72 column: FP16/BF16 5 / FP8 10 PFLOPS with sparsity per GPU, halved; 186 GB "
                 "HBM3e at 8 TB/s; NVLink 5 1.8 TB/s GPU-to-GPU; NVLink-C2C 900 GB/s is the Grace link, not the "
                 "all-reduce path)"),
    "mi300x": Gpu("AMD Instinct MI300X 192GB", 192e9, 5.3e12, 1307.4e12, 2614.9e12, "xgmi", _XGMI3,
                  f"{_MI300X} (BF16 1,307.4 / FP8 2,614.9 TFLOPS dense, twice with sparsity; HBM3 5.3 TB/s); "
                  f"Infinity Fabric 7 links x 64 GB/s one way: {_XGMI_BLOG}"),
    "mi325x": Gpu("AMD Instinct MI325X 256GB", 256e9, 6.0e12, 1307.4e12, 2614.9e12, "xgmi", _XGMI3,
                  f"{_MI325X} (256 GB HBM3E, 6 TB/s; compute as MI300X: FP8 2,614.9 dense / 5,229.8 sparse, BF16 "
                  "1,307.4, as quoted at https://awesomeagents.ai/hardware/amd-mi325x); Infinity Fabric as MI300X"),
    "mi355x": Gpu("AMD Instinct MI355X 288GB", 288e9, 8.0e12, 2.5e15, 5.0e15, "xgmi", _XGMI4,
                  f"{_MI355X} (288 GB HBM3E, 8 TB/s); FP8 5 PFLOPS dense per AMD's ISSCC 2026 paper as reported at "
                  "https://www.world-today-news.com/?p=7253162, BF16 half of it; Infinity Fabric 7 links, 1,075 GB/s "
                  "both directions: recalled, not verified"),
}

#: Achievable all-reduce bus bandwidth per GPU (bytes/s) of an 8-GPU group, as nccl-tests / rccl-tests
#: ``all_reduce_perf`` reports busBw at large messages, keyed by :func:`link_key`: the link kind and its raw
#: one-way GB/s. Small messages (a decode step's activations) see less: latency, not bandwidth, bounds them.
LINKS: dict[str, float] = {
    "nvlink-900": 830e9,
    "nvlink-450": 480e9,
    "nvlink-300": 230e9,
    "nvlink-200": 215e9,
    "pcie-64": 28e9,
    "pcie-32": 15e9,
    "xgmi-448": 300e9,
    "xgmi-538": 360e9,
}

#: Where each :data:`LINKS` figure came from.
LINK_SOURCES: dict[str, str] = {
    "nvlink-900": "8x B200: 'all_reduce_perf of 8 B200s in a single machine ... ours is 830+' GB/s busbw, "
                  "https://github.com/NVIDIA/nccl/issues/1807 (one operator's measurement, NCCL 2.27)",
    "nvlink-450": "8x H100 SXM: ~480 GB/s busbw with NVLink SHARP (the all-reduce default), ~370 GB/s with "
                  "NCCL_ALGO=RING (NCCL maintainer, https://github.com/NVIDIA/nccl-tests/issues/212); 8x H200 "
                  "measured 475 GB/s, https://github.com/NVIDIA/nccl-tests/issues/272",
    "nvlink-300": "8x A100 SXM: 232.5 GB/s busbw single node, https://github.com/NVIDIA/nccl-tests/issues/175 "
                  "(~200 GB/s in https://github.com/NVIDIA/nccl-tests/issues/149)",
    "nvlink-200": "8x H800: 215 GB/s busbw, https://github.com/NVIDIA/nccl/issues/1374 ; A800 (same 400 GB/s "
                  "NVLink) not measured here, assumed alike",
    "pcie-64": "8x RTX 5090 on PCIe Gen5: 28 GB/s busbw (35 GB/s on 4), https://github.com/NVIDIA/nccl/issues/1639 ; "
               "the NCCL maintainer there: PCIe systems are bounded by what CPU and memory deliver",
    "pcie-32": "8 PCIe Gen4 GPUs: ~17 GB/s busbw, https://github.com/NVIDIA/nccl-tests/issues/128 ; 8x RTX 4090 "
               "reported lower, https://github.com/NVIDIA/nccl-tests/issues/269 ; 15 GB/s taken between them",
    "xgmi-448": f"8x MI300X: derived, not a measured busbw: {_XGMI_BLOG} puts usable xGMI at ~48 GB/s per link "
                "(75% of 64), x 7 links = 336 GB/s, less RCCL overhead ~300 GB/s",
    "xgmi-538": f"8x MI355X: derived, not measured: the MI300X figure scaled by the links' raw ratio "
                f"(1,075 / 896 GB/s both directions, {_MI355X} and {_MI300X})",
}


def link_key(g: Gpu) -> str:
    """The :data:`LINKS` key of ``g``'s interconnect: its kind and raw one-way GB/s, e.g. ``nvlink-450``."""
    return f"{g.link}-{g.link_bytes_s / 1e9:.0f}"


def allreduce_bytes_s(g: Gpu) -> float:
    """The all-reduce bus bandwidth per GPU an 8-GPU group of ``g`` measures (:data:`LINKS`)."""
    return LINKS[link_key(g)]


def _normalised(name: str) -> str:
    """``name`` folded the way :func:`gpu` matches it: case-insensitive, ``_`` and spaces read as ``-``."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def gpu(name: str) -> Gpu:
    """The :data:`GPUS` entry called ``name`` (case-insensitive, ``_`` and ``-`` alike), else a
    :class:`ParameterError` naming ``--gpu`` and the choices, in one line."""
    found = GPUS.get(_normalised(name)) if isinstance(name, str) else None
    if found is None:
        raise ParameterError("--gpu", f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return found
