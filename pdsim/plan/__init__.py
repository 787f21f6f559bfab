"""``pdsim plan``: the best deployment of a model on a GPU budget under SLOs.

The space (``spec``, ``space``), the bounds that prune it (``bounds``), the search
(``planner``), the Pareto front (``front``) and the exported ``vllm serve`` lines
(``serve_lines``). docs/plan.md describes it.
"""

from pdsim.plan.front import VALIDATION_ERROR, pareto_front
from pdsim.plan.planner import Plan, PlanPoint, plan
from pdsim.plan.space import Candidate, Layout, RoleChoice, enumerate_candidates
from pdsim.plan.spec import PlanSpec, read_plan_config

__all__ = ["VALIDATION_ERROR", "Candidate", "Layout", "Plan", "PlanPoint", "PlanSpec",
           "RoleChoice", "enumerate_candidates", "pareto_front", "plan", "read_plan_config"]
