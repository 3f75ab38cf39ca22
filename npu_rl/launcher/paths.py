"""Old name of :mod:`npu_rl.launcher.run_files`, kept only for npu_rl/render/compose.py until it imports
``run_files`` itself; new code imports ``run_files``."""

from .run_files import *  # noqa: F401,F403
