"""Vendor hardware tools the serving gate reads where they are installed: amd-smi, the ROCm
Validation Suite, rccl-tests/nccl-tests all_reduce_perf and Kunlunxin xpu-smi.

Each module parses one tool's real output formats (pinned in tests/data/vendor) and judges it;
result.ToolResult is the one shape of every verdict, and a tool that is absent is reported as
not run, never as passed. Nothing here runs a tool: the caller captures its output.
"""
