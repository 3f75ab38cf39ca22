"""Every recipe field is documented (`Field(description=...)`), and `npu-rl recipe explain` prints that
documentation, with a recipe's values beside the defaults."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from npu_rl.cli import main
from npu_rl.recipe.explain import entries
from npu_rl.recipe.schema import Recipe


def _models(annotation) -> list[type[BaseModel]]:
    from typing import get_args

    return [a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]


def _undocumented(model: type[BaseModel], prefix: str = "") -> list[str]:
    missing = []
    for key, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(f"{model.__name__}.{key} ({prefix}{key})")
        for sub in _models(field.annotation):
            missing += _undocumented(sub, f"{prefix}{key}.")
    return missing


def test_every_recipe_field_has_a_description():
    # Walks the models themselves (not explain's own walk), so a field explain skipped would still fail here.
    assert _undocumented(Recipe) == [], "recipe fields without Field(description=...)"


def test_the_check_finds_a_nested_field_without_one():
    from pydantic import Field

    class Inner(BaseModel):
        documented: int = Field(1, description="one")
        bare: int = 2

    class Outer(BaseModel):
        inner: Inner | None = Field(None, description="a section")
        blank: str = Field("", description="  ")

    assert _undocumented(Outer) == ["Inner.bare (inner.bare)", "Outer.blank (blank)"]


def test_explain_walks_every_field():
    names = [e.name for e in entries()]
    assert len(names) == len(set(names)) > 100
    assert {
        "algorithm.lr",
        "actor.recompute.num_layers",
        "prepare.weight_conversion.mcore_path",
        "reward.weights.cot",
        "verl_overrides",
    } <= set(names)


def _explain(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["recipe", "explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _names(out: str) -> list[str]:
    """The fields of explain's output, in order (a description line holds words, not one dotted name)."""
    return [t for line in out.splitlines() if " " not in (t := line.strip().split("  ")[0])]


def _line(out: str, name: str) -> str:
    (line,) = [x for x in out.splitlines() if x.strip().split("  ")[0] == name]
    return line


def test_explain_prints_the_descriptions(capsys):
    code, out, err = _explain(capsys)
    assert code == 0 and err == ""
    assert _names(out) == [e.name for e in entries()]
    assert "Actor learning rate -> verl `actor_rollout_ref.actor.optim.lr`" in out
    assert "default 1e-06" in _line(out, "algorithm.lr")
    assert "default required" in _line(out, "algorithm.train_batch_size")
    assert "recipe" not in _line(out, "algorithm.lr")  # no recipe, no value column
    assert _line(out, "watchdog").startswith("watchdog  WatchdogSpec")


def test_explain_with_a_recipe_shows_its_value_beside_the_default(capsys):
    code, out, _ = _explain(capsys, "--recipe", "tiny_math_cpu")
    assert code == 0
    lr = _line(out, "algorithm.lr")
    assert "default 1e-06" in lr and "recipe 0.0003" in lr and lr.index("default") < lr.index("recipe")
    assert lr.endswith("*")  # differs from the default
    assert _line(out, "algorithm.seed").endswith("recipe 1")  # same as the default: no mark
    assert _line(out, "actor.recompute.granularity").endswith("recipe -")  # under a section the recipe leaves null


def test_explain_applies_set(capsys):
    code, out, _ = _explain(capsys, "--recipe", "tiny_math_cpu", "--set", "algorithm.lr=1e-5", "algorithm.lr")
    assert code == 0 and "recipe 1e-05" in out


def test_field_narrows_the_output(capsys):
    code, out, _ = _explain(capsys, "algorithm")
    names = _names(out)
    assert code == 0 and names[0] == "algorithm" and "algorithm.lr" in names
    assert all(n == "algorithm" or n.startswith("algorithm.") for n in names)
    code, out, _ = _explain(capsys, "algorithm.lr")
    assert code == 0 and _names(out) == ["algorithm.lr"] and out.startswith("algorithm.lr  float")
    code, out, _ = _explain(capsys, "reward.weights")
    assert code == 0 and "reward.weights.accuracy" in out and "reward.timeout_s" not in out


@pytest.mark.parametrize(
    "field,hint", [("algorithm.lrr", "did you mean algorithm.lr"), ("nothing", "lists them all"), ("algo", None)]
)
def test_an_unknown_field_is_one_error_line(capsys, field, hint):
    code, out, err = _explain(capsys, field)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"npu-rl: error: recipe explain: unknown recipe field {field!r}")
    assert hint is None or hint in lines[0]


def test_set_without_a_recipe_is_an_error(capsys):
    code, _, err = _explain(capsys, "--set", "algorithm.lr=1")
    assert code == 2 and err.startswith("npu-rl: error:") and len(err.strip().splitlines()) == 1
