"""Stand-in of the vendor's pre-shim (module stubs before sglang's imports): records each run."""

SHIM_RUNS: list[str] = []


def _kunlun_pre_shim() -> None:
    SHIM_RUNS.append("pre_shim")
