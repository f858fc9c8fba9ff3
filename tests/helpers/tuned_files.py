"""Tuned files in the formats the libraries write (for sglx_core/tuned.py's tests).

AITER's tuned tables (aiter/configs/bf16_tuned_gemm.csv has a gfx and a cu_num column; older
tables such as a8w8_blockscale_tuned_gemm.csv only cu_num), PyTorch TunableOp's results
(Validator lines, then op, params, solution, time; torch/cuda/tunable.py) and hipBLASLt's
offline-tuning file (a 'Git Version:' line, then one problem per line; hipblaslt.cpp
override_path_compare_git_version).
"""

from __future__ import annotations

from pathlib import Path

BF16_HEADER = (
    "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,"
    "kernelName,err_ratio,tflops,bw"
)
BF16_ROW = (
    "{gfx},{cu},64,256,5120,False,torch.bfloat16,torch.float32,False,False,asm,5,13,7.9191,"
    "_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE,0.0,21.19,417.92"
)
BLOCKSCALE_HEADER = "cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
BLOCKSCALE_ROW = (
    "{cu},16,1536,7168,8,0,19.3027,a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_"
    "16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1,18.25,578.88,0.0"
)
TUNABLEOP = (
    "Validator,PT_VERSION,2.9.1\n"
    "Validator,ROCM_VERSION,7.2.4.0-54-1a2b3c4\n"
    "Validator,HIPBLASLT_VERSION,1.2.0-abc123\n"
    "Validator,ROCBLAS_VERSION,5.2.0-def456\n"
    "GemmTunableOp_BFloat16_TN,tn_4096_4096_64,Gemm_Hipblaslt_1219,1.262\n"
    "GemmTunableOp_BFloat16_TN,tn_8192_4096_64,Gemm_Rocblas_1216,0.033\n"
)
HIPBLASLT = (
    "Git Version: 1a2b3c4d\n"
    "N,T,1,4096,4096,64,bf16_r,bf16_r,bf16_r,f32_r,56073,Cijk_Alik_Bljk_BBS_BH_MT128x128x64\n"
)


def table(header: str, row: str, *cus: tuple[str, int]) -> str:
    return "\n".join([header, *(row.format(gfx=gfx, cu=cu) for gfx, cu in cus)]) + "\n"


def write_tuning_run(folder: Path) -> Path:
    """What a tuning run on an MI300X left in its folder: AITER's bf16 table (rows of the
    gfx942 card and, as AITER ships it, of gfx950), a legacy blockscale table, TunableOp's
    results of device 0 and 1, hipBLASLt's file, and a log that is no tuned file."""
    folder.mkdir(parents=True)
    files = {
        "bf16_tuned_gemm.csv": table(BF16_HEADER, BF16_ROW, ("gfx942", 304), ("gfx950", 256)),
        "a8w8_blockscale_tuned_gemm.csv": table(BLOCKSCALE_HEADER, BLOCKSCALE_ROW, ("", 304)),
        "tunableop_results0.csv": TUNABLEOP,
        "tunableop_results1.csv": TUNABLEOP,
        "hipblaslt_tuning.txt": HIPBLASLT,
        "tune.log": "tuning 4 shapes\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder
