"""`push_to_hub=<repo>`: upload the exported folder as it is with huggingface_hub. Checked before the export starts
(a token must exist), and a failed upload names the folder that stays on disk so the push can be retried by hand."""

from __future__ import annotations

from pathlib import Path

from agentforge.export.source import ExportError

TOKEN_FIX = ("log in with `hf auth login` (or `huggingface-cli login`), or set HF_TOKEN to a token with write "
             "access (https://huggingface.co/settings/tokens)")


def check_token(repo: str) -> str:
    """The Hugging Face token to push `repo` with; refused by name, before any work, when there is none."""
    if not repo or repo.count("/") != 1 or any(not part for part in repo.split("/")):
        raise ExportError(f"push_to_hub={repo!r}: expected <user or organisation>/<name>, e.g. me/sokoban-agent")
    try:
        from huggingface_hub import get_token
    except ImportError as error:  # pragma: no cover - huggingface_hub comes with transformers
        raise ExportError(f"push_to_hub needs huggingface_hub ({error}); pip install huggingface_hub") from None
    token = get_token()
    if not token:
        raise ExportError(f"push_to_hub={repo}: no Hugging Face token found, nothing was exported or uploaded; "
                          f"{TOKEN_FIX}. Or export without push_to_hub and upload the folder later")
    return token


def push_folder(folder: Path, repo: str, token: str, private: bool = False) -> str:
    """Create `repo` (if needed) and upload `folder`; returns the repo's URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        url = api.create_repo(repo, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="agentforge export")
    except Exception as error:  # noqa: BLE001  (network, auth, permissions: all end the same way for the user)
        raise ExportError(f"push_to_hub={repo} failed ({type(error).__name__}: {str(error).splitlines()[0][:300]}). "
                          f"The export itself is complete in {folder}; check the network and the token ({TOKEN_FIX}) "
                          f"and upload it again with `hf upload {repo} {folder}`") from None
    return str(url)
