"""`OpenAIPolicy`: any OpenAI-compatible chat server (vLLM, SGLang, Ollama...) by base URL."""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from leap_agents.policies.base import Generation, History

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIPolicy:
    """Sends each history to ``{base_url}/chat/completions``, concurrently, with retries.

    Args:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the served model name.
        api_key: bearer token; ``$OPENAI_API_KEY`` by default, none if unset.
        concurrency: requests in flight at once.
        max_retries: retries of a failed request (connection errors, 429, 5xx), with exponential
            backoff from `backoff_s` (doubling, with jitter, capped at 60 s).
        timeout_s: per-request timeout.
        logprobs: ask the server for token log-probs (vLLM/SGLang support it).
        temperature, top_p, max_new_tokens: default sampling parameters.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, concurrency: int = 16,
                 max_retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 600.0, logprobs: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 2048,
                 extra_body: dict[str, Any] | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.logprobs = logprobs
        self.defaults = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
        self.extra_body = dict(extra_body or {})

    def _payload(self, history: History, opts: dict[str, Any]) -> dict[str, Any]:
        body = {"model": self.model, "messages": list(history), "temperature": opts["temperature"],
                "top_p": opts["top_p"], "max_tokens": opts["max_new_tokens"], "n": 1, **self.extra_body}
        if opts.get("seed") is not None:
            body["seed"] = int(opts["seed"])
        if self.logprobs:
            body["logprobs"] = True
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay = self.backoff_s
        for attempt in range(self.max_retries + 1):
            try:
                request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read().decode())
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_STATUS or attempt == self.max_retries:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise RuntimeError(f"POST {self.url} failed with HTTP {exc.code}: {detail}") from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(f"POST {self.url} failed after {attempt + 1} attempts: {exc}; is the server "
                                       "running and base_url right (it should end in /v1)?") from exc
            log.info("request failed, retrying in %.2f s (attempt %d/%d)", delay, attempt + 1, self.max_retries)
            time.sleep(delay * (1 + 0.1 * random.random()))
            delay = min(delay * 2, 60.0)
        raise AssertionError("unreachable")

    def _one(self, history: History, opts: dict[str, Any]) -> Generation:
        reply = self._post(self._payload(history, opts))
        choice = reply["choices"][0]
        text = choice.get("message", {}).get("content") or ""
        logprobs, token_ids = [], []
        content = (choice.get("logprobs") or {}).get("content") or []
        for entry in content:
            logprobs.append(float(entry.get("logprob", 0.0)))
            if "token_id" in entry:
                token_ids.append(int(entry["token_id"]))
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Generation(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        opts = {**self.defaults, **{k: v for k, v in sampling.items() if v is not None}}
        if not histories:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(histories))) as pool:
            return list(pool.map(lambda h: self._one(h, opts), histories))
