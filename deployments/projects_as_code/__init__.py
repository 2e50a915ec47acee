"""Projects as code: a YAML or JSON document that declares projects and their pipelines.

``load`` reads a file, ``parse`` validates a document into specs (collecting every error,
each naming its key), ``apply`` writes specs in one transaction. See docs/deployments.md.
"""

from deployments.projects_as_code.apply import ApplyResult, apply, apply_document
from deployments.projects_as_code.schema import InvalidDocument, load, parse

__all__ = ("ApplyResult", "InvalidDocument", "apply", "apply_document", "load", "parse")
