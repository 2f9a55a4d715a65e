"""The benchmark library behind ``cubeplug bench`` (:mod:`cubeplug.commands.bench`): cubeplug's figures
beside the raw libraries' (:mod:`.baselines`), measured in the same run. GPU libraries are imported
only while their backend is measured.
"""
