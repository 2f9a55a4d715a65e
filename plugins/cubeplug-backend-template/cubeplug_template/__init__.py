"""cubeplug-backend-template: a complete cubeplug backend to copy (host memory, ``python`` kernels).

Nothing is imported here: cubeplug imports :mod:`cubeplug_template.plugin` through the entry point
only when the backend is needed, and the plugin imports the other modules only when it builds a client.
"""

#: The backend's name: the entry-point name in pyproject.toml and the BackendSpec name.
NAME = "template"
