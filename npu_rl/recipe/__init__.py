from .loader import load_recipe, parse_recipe, parse_set_args, resolve_recipe_path
from .schema import Recipe

__all__ = ["Recipe", "load_recipe", "parse_recipe", "parse_set_args", "resolve_recipe_path"]
