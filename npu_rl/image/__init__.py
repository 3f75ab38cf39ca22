"""Container images: what each variant is built from (``spec``), building and
pushing it through the Docker API (``build``), and showing progress (``progress``)."""
