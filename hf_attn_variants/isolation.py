"""Running code where `hf_attn_variants` cannot be imported, as a Hub user who has only transformers loads one of
our checkpoints (remote code only). The one harness that `publish.check_loads` and the tests use.

`python -I` puts neither the working directory, PYTHONPATH nor the user site on `sys.path`, and `BLOCK_PACKAGE`,
the script's prologue, installs a finder that refuses the package however it is installed (an editable install's
finder included).
"""

import os
import subprocess
import sys
import tempfile


def blocker(*names: str) -> str:
    """A script prologue that installs a finder refusing the top-level packages `names` (a `ModuleNotFoundError`
    saying so), however they are installed."""
    return f"""
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {names!r}:
            raise ModuleNotFoundError(f"{{name}} is blocked: this process loads remote code only")
sys.meta_path.insert(0, _Block())
"""


BLOCK_PACKAGE = blocker("hf_attn_variants")


def run_isolated(
    code: str, args=(), *, python: str = sys.executable, env: dict | None = None, cwd=None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run `code` (after `BLOCK_PACKAGE`) as `python -I -c code *args`, offline (HF_HUB_OFFLINE=1 unless `env`
    says otherwise), with a fresh HF_MODULES_CACHE so remote code is copied from the checkpoint, not reused. `env`
    (default: this process's) is the base environment, less PYTHONPATH; `python` may be another environment's
    interpreter. Returns the finished process (stdout and stderr as text); the caller checks its return code."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="hav-isolated-") as modules:
        env["HF_MODULES_CACHE"] = modules
        return subprocess.run(
            [python, "-I", "-c", BLOCK_PACKAGE + code, *map(str, args)],
            env=env,
            cwd=str(cwd or modules),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


__all__ = ["BLOCK_PACKAGE", "blocker", "run_isolated"]
