"""Doctor output: the diagnosis, the evidence lines, the fix."""

from __future__ import annotations

import json
from collections.abc import Sequence

from podserve.kube.doctor.model import Diagnosis, PodDump


def to_text(results: Sequence[tuple[PodDump, list[Diagnosis]]]) -> str:
    out: list[str] = []
    for dump, found in results:
        status = f"{len(found)} problem(s) found" if found else "no known problem found"
        out.append(f"pod {dump.name} ({dump.phase or 'unknown phase'}): {status}")
        for diagnosis in found:
            out += [
                "",
                f"[{diagnosis.id}] {diagnosis.title}",
                f"  why: {diagnosis.explanation}",
                "  evidence:",
            ]
            out += [f"    {line}" for line in diagnosis.evidence]
            out.append("  fix:")
            out += [f"    - {line}" for line in diagnosis.fix]
        out.append("")
    return "\n".join(out)


def to_json(results: Sequence[tuple[PodDump, list[Diagnosis]]]) -> str:
    payload = [
        {
            "pod": dump.name,
            "phase": dump.phase,
            "diagnoses": [
                {
                    "id": d.id,
                    "title": d.title,
                    "explanation": d.explanation,
                    "evidence": list(d.evidence),
                    "fix": list(d.fix),
                }
                for d in found
            ],
        }
        for dump, found in results
    ]
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"
