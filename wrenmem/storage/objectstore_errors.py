"""What a failed object-store request means, in one line: LanceDB raises a Rust debug dump
(``Invalid input, Failed to connect to namespace: IO { source: Generic { store: …``) whose
S3 error code, or connection error, says what failed; this says that, and what to check.
"""

from __future__ import annotations

import re

# Per scheme: the variables that hold the credentials and the endpoint (for the hints).
STORAGE_HINTS: dict[str, tuple[str, str]] = {
    "s3": ("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)",
           "AWS_ENDPOINT_URL"),
    "gs": ("GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS", "the gs:// URI"),
    "az": ("AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or a SAS token)",
           "AZURE_STORAGE_ENDPOINT"),
}
STORAGE_HINTS["s3+ddb"] = STORAGE_HINTS["s3"]
STORAGE_HINTS["gcs"] = STORAGE_HINTS["gs"]
STORAGE_HINTS["abfs"] = STORAGE_HINTS["az"]
_CREDENTIAL_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken",
                     "InvalidToken", "InvalidClientTokenId", "AuthorizationHeaderMalformed",
                     "AuthenticationFailed")
_PERMISSION_CODES = ("AccessDenied", "AllAccessDisabled", "AuthorizationFailure",
                     "AuthorizationPermissionMismatch")
_BUCKET_CODES = ("NoSuchBucket", "ContainerNotFound")


def explain(error: BaseException, uri: str = "", endpoint: str = "") -> str:
    """One line for a failed object-store request: what failed (credentials, permission,
    bucket, endpoint, region) and what to check. ``endpoint``: the environment's, if any."""
    text = str(error)
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "s3"
    keys, endpoint_var = STORAGE_HINTS.get(scheme, ("the credentials", "the endpoint"))
    where = f" {endpoint}" if endpoint else ""
    found = re.search(r"<Code>(.*?)</Code>", text)
    code = found.group(1) if found else ""
    if code in _CREDENTIAL_CODES:
        return f"the credentials were refused ({code}): check {keys}"
    if not code and ("Failed to get AWS credentials" in text
                     or "no credentials" in text.lower()):
        return f"no credentials were found: set {keys}"
    if code in _PERMISSION_CODES or (not code and re.search(r"status: 403\b", text)):
        return (f"permission denied ({code or 'HTTP 403'}): these credentials may not read "
                "or write this bucket and prefix; check the bucket's policy and the key's "
                "rights")
    if code in _BUCKET_CODES:
        bucket = uri.split("://", 1)[1].split("/", 1)[0] if "://" in uri else "?"
        return (f"the bucket {bucket!r} does not exist ({code}): check the bucket in "
                f"index_uri, and {endpoint_var} for the server that should hold it")
    if code:
        message = re.search(r"<Message>(.*?)</Message>", text)
        return (code + (f": {message.group(1)}" if message else "")).replace("\\", "")
    if "resolve region" in text:
        return f"the bucket's region is not known: set AWS_REGION (or {endpoint_var})"
    if "ConnectionRefused" in text or "Connection refused" in text:
        return (f"the endpoint{where} cannot be reached (connection refused): check "
                f"{endpoint_var} and that the server is up")
    if "dns error" in text.lower():
        return (f"the endpoint{where} cannot be reached (its host name does not resolve): "
                f"check {endpoint_var}")
    if "timed out" in text.lower() or "Timeout" in text:
        return (f"the endpoint{where} did not answer in time: check {endpoint_var}, the "
                "network, and that the server is up (or raise WRENMEM_STORAGE_TIMEOUT)")
    status = re.search(r"status: (\d{3})", text)
    first = text.splitlines()[0] if text else type(error).__name__
    return (f"HTTP {status.group(1)}: " if status else "") + first[:240]
