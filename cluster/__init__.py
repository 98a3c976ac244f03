"""The Ray layer: the only package that imports ray. Install with pip install \x27.[cluster]\x27."""
