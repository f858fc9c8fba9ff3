"""Vendor hardware tools the serving gate reads where they are installed: amd-smi, the ROCm
Validation Suite, rccl-tests/nccl-tests all_reduce_perf and Kunlunxin xpu-smi.

Each module parses one tool's real output formats (pinned in tests/data/vendor) and judges it;
result.ToolResult is the one shape of every verdict, and a tool that is absent is reported as
not run, never as passed. Nothing here runs a tool: the caller captures its output.
"""

# The most tool output any parser here reads: a caller that captures a tool's output keeps this.
from sglx_core.gate.tools._input import MAX_OUTPUT_BYTES

__all__ = ["MAX_OUTPUT_BYTES"]
