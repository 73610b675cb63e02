"""TEMPORARY shim until the validate split lands: MLflow logging of a validation report."""

from jobs.validate.gate import log_validation, log_validations  # noqa: F401
