"""`sglx-preflight`: a dry run of everything SGLang needs, in seconds, without loading a model.

The image entrypoint runs it beside the server start. Each check passes, warns or fails; a
failure carries one of the five failure classes (plugin not found, device init failed, symbol
not found, init hang, config refused) and the fix. The modules, one job each:

- `profile_checks`, `hardware`, `environment`, `libraries`: checks that read files only;
- `child` (the probe child), `protocol` (how it reports), `steps` (how its steps are
  classified), `child_checks` (runs it, turns a crash or a hang into a failed check);
- `server_args_check`: the server arguments with sglang's parser, in the child;
- `runner` (every check, the report) and `command` (`sglx-preflight`, exit codes 0/1/2).
"""

from sglx_runtime.preflight.command import main
from sglx_runtime.preflight.runner import run

__all__ = ["main", "run"]
