"""User-facing errors: the CLI prints them as one line and exits with their code."""

from .exit_codes import Exit


class UserError(Exception):
    """Bad input the user can fix (recipe field, missing file, port in use...).

    Raised before any expensive work starts; the CLI prints ``npu-rl: error: <msg>``
    and exits with ``exit_code`` instead of showing a traceback.
    """

    exit_code = int(Exit.BAD_INPUT)

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
