"""Generated recipes and `--set` values: every outcome is exit 0, or exit 2 with one `npu-rl: error:` line."""

from __future__ import annotations

import contextlib
import io

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_rl.cli import main
from npu_rl.paths import recipes_dir

TINY = yaml.safe_load((recipes_dir() / "tiny_math_cpu.yaml").read_text())
KEYS = sorted(f"{section}.{key}" for section, body in TINY.items() if isinstance(body, dict) for key in body)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=True), st.text(max_size=12)
)
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.text(max_size=20))


def _outcome(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's usage errors (`npu-rl` exits with the same code)
            code = exit_.code
    return code, err.getvalue()


def _one_line_or_success(code: int, err: str) -> None:
    assert "Traceback" not in err
    if code != 0:
        lines = [line for line in err.strip().splitlines() if line.startswith("npu-rl: error:")]
        assert code == 2 and len(lines) == 1, (code, err)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=15)), raw=st.text(max_size=25))
def test_any_set_value_on_the_cli(key, raw):
    _one_line_or_success(*_outcome(["train", "--recipe", "tiny_math_cpu", "--set", f"{key}={raw}", "--dry-run"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=4))
def test_generated_recipes(tmp_path_factory, changes):
    recipe = yaml.safe_load(yaml.safe_dump(TINY))
    for dotted, value in changes.items():
        section, key = dotted.split(".", 1)
        recipe[section][key] = value
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    _one_line_or_success(*_outcome(["recipe", "validate", "--recipe", str(path)]))
    _one_line_or_success(*_outcome(["train", "--recipe", str(path), "--dry-run"]))
