"""A frozen copy of attnflow.explain as of commit 8cf0116 (before the speed work): the baseline.

benchmarks/explain_speed.py times today's library against this copy. The modules are verbatim
copies of src/attnflow/explain/{_common,_maxflow,flow,heads,rollout,raw,rows}.py at that commit
(`git show 8cf0116:src/attnflow/explain/flow.py`); do not edit them.
"""

from .flow import attention_flow
from .heads import head_flow, head_rollout
from .raw import raw_attention
from .rollout import attention_rollout
from .rows import select_rows

__all__ = ["attention_flow", "attention_rollout", "head_flow", "head_rollout", "raw_attention", "select_rows"]
