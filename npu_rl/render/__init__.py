"""Rendering of deployment files (compose, Kubernetes) from recipes with jinja2."""
