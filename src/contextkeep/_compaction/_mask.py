"""Layer 1, observation masking: old tool outputs (and images) become previews with references.

The mask boundary moves to the round `max_observation_age_rounds` back (never into the
protected rounds) and only ever forward, in one jump; the outputs were offloaded when they
were added, so the preview can name the file.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep._compaction._names import LayerName
from contextkeep._compaction._pass import PassContext
from contextkeep._compaction.state import CompactionState
from contextkeep._messages import Message
from contextkeep._rounds import Round

__all__ = ["MaskLayer", "mask"]


class MaskLayer:
    """L1: mask tool outputs older than `max_observation_age_rounds` rounds, and surplus images."""

    name = LayerName.MASK
    """`L1`."""

    def decide(self, ctx: PassContext) -> bool:
        """While the view is over the target."""
        return ctx.tokens > ctx.target

    async def apply(self, ctx: PassContext) -> None:
        """Move the mask and image boundaries forward."""
        config = ctx.config
        age, images = config.max_observation_age_rounds, config.max_image_num
        ctx.propose(
            self.name,
            mask(ctx.rounds, ctx.transcript, ctx.state, age=age, protect=ctx.protect, max_images=images),
        )


def mask(
    rounds: Sequence[Round],
    transcript: Sequence[Message],
    state: CompactionState,
    *,
    age: int,
    protect: int,
    max_images: int,
) -> CompactionState:
    """Move the mask boundary to the round `age` rounds back (never past `protect`)."""
    body = [r for r in rounds if not (r.kind == "system" and r.index == 0)]
    boundary = state.mask_boundary if len(body) <= age else min(body[len(body) - age].start, protect)
    image_boundary = _image_boundary(transcript, max_images, protect)
    return state.evolve(
        mask_boundary=max(state.mask_boundary, boundary),
        image_boundary=max(state.image_boundary, image_boundary),
    )


def _image_boundary(transcript: Sequence[Message], max_images: int, limit: int) -> int:
    """Smallest index such that at most `max_images` images lie at or after it (capped at `limit`)."""
    seen = 0
    for i in range(len(transcript) - 1, -1, -1):
        content = transcript[i].content
        if content is None or isinstance(content, str):
            continue  # plain text: no media (the common case, skipped without building parts)
        seen += len(transcript[i].media)
        if seen > max_images:
            return min(i + 1, limit)
    return 0
