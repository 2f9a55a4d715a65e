"""The registry: which backends are installed and which one a client gets.

Plugin discovery and loading (:mod:`~cubeplug.registry.plugins`, :mod:`~cubeplug.registry.entries`),
selectors and selection (:mod:`~cubeplug.registry.selector`, :mod:`~cubeplug.registry.selection`),
and the settings read from files and the environment (:mod:`~cubeplug.registry.settings`). It sits
above the runtime core (:mod:`cubeplug.core`), which never imports it (docs/architecture.md, "Layers").
"""
