"""The one notebook pipeline: find the sources, convert them, execute them under nbval."""
