"""Built-in backends; each registers through the ``cubeplug.backends`` entry-point group."""
