"""Every crawl action and read, whichever door it came in by (page, admin, API, CLI): the doors
call `services.crawl_start(...)` and never the engine. Each action lives once, in one module:

- actions.py   create, start, pause, resume, cancel, add seeds, retry the failures, delete
- editing.py   change a crawl that exists: a draft's settings, its credentials, a running
               crawl's limits and scope, run again (a new draft with the same settings)
- hosts.py     one host of a crawl: the host view, hold, release, drop
- cleaning.py  a crawl's inputs checked, every problem named with its field
- reads.py     what the doors read: which crawls a user sees, counters, progress, memory
- preview.py   the extraction rules' preview on one page

The services drive the engine through its one face, crawls.engine.control.
"""

from crawls.services.actions import (
    COPIES_GET_NONE,
    RETIRED_STATE_SECONDS,
    CrawlActionError,
    crawl_add_seeds,
    crawl_cancel,
    crawl_copy_credentials,
    crawl_create,
    crawl_delete,
    crawl_pause,
    crawl_resume,
    crawl_retry_failed,
    crawl_start,
)
from crawls.services.cleaning import (
    binding_note,
    clean_credentials,
    clean_patterns,
    clean_rules,
    clean_seeds,
    crawl_clean,
    crawl_problems,
    credentials_note,
    value_problem,
)
from crawls.services.editing import (
    CREDENTIAL_STATES,
    LIVE_FIELDS,
    LIVE_STATES,
    SCOPE_FIELDS,
    SETTINGS,
    LiveChange,
    can_change_live,
    can_edit,
    can_enter_credentials,
    crawl_admin_changed,
    crawl_change_live,
    crawl_enter_credentials,
    crawl_run_again,
    crawl_update,
    origins_of_seeds,
    owner_only,
)
from crawls.services.hosts import (
    HOLD_MAX_MINUTES,
    crawl_host_drop,
    crawl_host_hold,
    crawl_host_release,
    crawl_hosts,
)
from crawls.services.preview import PREVIEW_OPTIONS, PREVIEW_RULES_SECONDS, rules_preview
from crawls.services.reads import (
    crawl_progress,
    crawl_stats,
    crawl_stats_safe,
    crawl_waiting,
    crawls_stats_safe,
    credentials_left_out,
    credentials_shown,
    redis_memory_safe,
    rendering_problem,
    visible_crawls,
)
