"""`search_topic` (synthetic, clearly labelled results) and `extract_facts` (real text mining).

No network is used: a demo swarm must run anywhere. `search_topic` makes up plausible
result records from the query (the same query always gives the same records) and says so in
every record; replace it with a real search action for actual research.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from mail.api import action
from mail.examples.arguments import bounded_text, choice, one_of, required_text, schema, string

SOURCES = ("wikipedia", "academic", "news", "general")
MAX_TEXT = 100_000

SEARCH_TOPIC_PARAMETERS = schema(
    ["query"],
    query=string("What to look up"),
    source=one_of(SOURCES, "Which kind of source to prefer (default general)"),
)

EXTRACT_FACTS_PARAMETERS = schema(["text"], text=string("The text to pull factual statements from"))

_KINDS = {
    "wikipedia": ("encyclopedia article", "https://encyclopedia.example/wiki/"),
    "academic": ("journal paper", "https://papers.example/abs/"),
    "news": ("news report", "https://news.example/story/"),
    "general": ("web page", "https://web.example/page/"),
}

_FACT_HINTS = re.compile(
    r"\d|\b(is|are|was|were|has|have|contains|consists|founded|discovered|invented|measured)\b",
    re.I,
)


def synthetic_results(query: str, source: str) -> list[dict[str, Any]]:
    digest = hashlib.sha256(f"{source}|{query.lower()}".encode()).hexdigest()
    kind, base = _KINDS[source]
    slug = re.sub(r"[^a-z0-9]+", "-", query.lower()).strip("-")[:60] or "topic"
    results = []
    for rank in range(3):
        year = 2015 + int(digest[rank * 2 : rank * 2 + 2], 16) % 10
        results.append(
            {
                "title": f"{query.strip().capitalize()}: {('overview', 'analysis', 'update')[rank]}",
                "url": f"{base}{slug}-{digest[rank * 6 : rank * 6 + 6]}",
                "source_type": source,
                "year": year,
                "snippet": f"A {kind} about {query.strip()} ({year}).",
                "synthetic": True,
            }
        )
    return results


def candidate_facts(text: str, limit: int = 20) -> list[str]:
    """Sentences that state something checkable: numbers, dates or a defining verb."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    facts = [s.strip() for s in sentences if len(s.split()) >= 4 and _FACT_HINTS.search(s)]
    return facts[:limit]


@action(
    description="Search for material on a topic (demo: synthetic results, labelled as such).",
    parameters=SEARCH_TOPIC_PARAMETERS,
)
async def search_topic(args: dict[str, Any]) -> str:
    query = required_text(args, "query")
    source = choice(args, "source", SOURCES, default="general")
    results = synthetic_results(query, source)
    return json.dumps(
        {
            "query": query,
            "source": source,
            "results": results,
            "note": "synthetic demo results: no search service was contacted",
        }
    )


@action(
    description="Pull the sentences that state checkable facts out of a text.",
    parameters=EXTRACT_FACTS_PARAMETERS,
)
async def extract_facts(args: dict[str, Any]) -> str:
    facts = candidate_facts(bounded_text(args, "text", MAX_TEXT))
    return json.dumps({"facts": facts, "count": len(facts)})
