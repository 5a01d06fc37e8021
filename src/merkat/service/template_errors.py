"""The error of a bad template, shared by the YAML and XML readers."""


class TemplateError(ValueError):
    """A bad template: the message names the field (and the line, for files)."""
