"""`verify_claim` (a synthetic verdict, labelled as such) and `rate_confidence` (real weighing).

No fact database is consulted: `verify_claim` gives a deterministic demo verdict from the
claim's wording and the number of sources; `rate_confidence` computes a confidence from the
evidence it is given, weighting each kind of source.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mail.api import action
from mail.examples.arguments import array, objects, required_text, schema, string

# How much one piece of evidence counts, by the kind of source it came from.
SOURCE_WEIGHTS: dict[str, float] = {
    "academic": 1.0,
    "government": 0.9,
    "wikipedia": 0.7,
    "news": 0.6,
    "general": 0.4,
    "blog": 0.3,
    "social": 0.2,
}

_HEDGES = re.compile(r"\b(always|never|all|none|every|guaranteed|proves|100%)\b", re.I)

VERIFY_CLAIM_PARAMETERS = schema(
    ["claim"],
    claim=string("The statement to check"),
    sources=array({"type": "string"}, "URLs or names of sources that bear on the claim"),
)

RATE_CONFIDENCE_PARAMETERS = schema(
    ["claim", "evidence"],
    claim=string("The statement the evidence is about"),
    evidence=array(
        {
            "type": "object",
            "properties": {
                "source": string("Where it comes from"),
                "source_type": string(f"One of: {', '.join(SOURCE_WEIGHTS)}"),
                "supports": {"type": "boolean", "description": "Whether it supports it"},
            },
        },
        "Pieces of evidence for or against the claim",
    ),
)


def confidence_from(evidence: list[dict[str, Any]]) -> dict[str, Any]:
    """Weighted share of supporting evidence, shrunk towards 0.5 when evidence is thin."""
    weight_for = weight_against = 0.0
    for item in evidence:
        weight = SOURCE_WEIGHTS.get(str(item.get("source_type") or "general").lower(), 0.4)
        if item.get("supports", True):
            weight_for += weight
        else:
            weight_against += weight
    total = weight_for + weight_against
    if total == 0:
        return {"confidence": 0.5, "level": "unknown", "evidence_weight": 0.0}
    share = weight_for / total
    confidence = 0.5 + (share - 0.5) * min(total / 2.0, 1.0)
    level = "high" if confidence >= 0.75 else "medium" if confidence >= 0.55 else "low"
    return {
        "confidence": round(confidence, 3),
        "level": level,
        "evidence_weight": round(total, 2),
    }


@action(
    description="Check a claim against sources (demo: a synthetic verdict, labelled as such).",
    parameters=VERIFY_CLAIM_PARAMETERS,
)
async def verify_claim(args: dict[str, Any]) -> str:
    claim = required_text(args, "claim")
    sources = [str(s) for s in args.get("sources") or []]
    sweeping = bool(_HEDGES.search(claim))
    if sweeping:
        verdict = "disputed"
    elif sources:
        verdict = "supported"
    else:
        verdict = "unverified"
    return json.dumps(
        {
            "claim": claim,
            "verdict": verdict,
            "sources_checked": len(sources),
            "reason": (
                "absolute wording is rarely true without exception"
                if sweeping
                else "sources were given"
                if sources
                else "no sources were given to check against"
            ),
            "note": "synthetic demo verdict: no fact database was consulted",
        }
    )


@action(
    description="Rate the confidence in a claim from supporting and contradicting evidence.",
    parameters=RATE_CONFIDENCE_PARAMETERS,
)
async def rate_confidence(args: dict[str, Any]) -> str:
    claim = required_text(args, "claim")
    return json.dumps({"claim": claim, **confidence_from(objects(args, "evidence"))})
