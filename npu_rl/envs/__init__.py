"""The project's Python environments: their locks (``locks``) and where pip finds wheels (``pipconf``)."""
