"""The gcp target's planning: where on Google Cloud the cluster goes (a ctk/target/gcp
module's settings). What booting slurm-gcp's images means for ctk's images is
images.on_slurm_gcp_images (the target's boots_slurm_gcp_images trait)."""

from __future__ import annotations

from ..blueprint.errors import Collector
from ..blueprint.expand import Expanded, ExpandedModule
from ..blueprint.expression import is_deferred
from ..model import Deployment, GcpSettings
from .values import num_of


def plan_gcp(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> GcpSettings:
    """The project, region, zone and image build settings EM (a ctk/target/gcp module) gives;
    None for those it leaves to the blueprint's vars (or gcluster's --vars)."""
    assert em is not None  # the gcp target is chosen by its module

    def given(name: str):
        v = em.get(name)
        return None if v is None or is_deferred(v) else v

    text = {k: str(v) for k in ("project_id", "region", "zone", "image_machine_type") if (v := given(k)) is not None}
    return GcpSettings(**text, image_disk_size=num_of(given("image_disk_size")))
