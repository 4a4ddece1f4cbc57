"""What the Workers page shows: live RQ workers, queue lengths, failed jobs.

A job run for one crawl carries the crawl's id in its meta (JOB_CRAWL), so that the page can
show a user what their own crawls' jobs are and keep other people's to themselves.
"""

from django.conf import settings
from rq import Queue, Worker
from rq.registry import FailedJobRegistry, StartedJobRegistry

from crawlhub.redis.connections import get_redis

FAILED_JOBS_SHOWN = 20
# The job's meta key holding the id of the crawl it works for (crawls.engine.jobs sets it).
JOB_CRAWL = "crawl"


def overview(*, with_failed: bool) -> dict:
    """Workers and queues; the latest failed jobs too when with_failed (staff: they name other
    people's crawls, URLs and tracebacks)."""
    try:
        return _overview(with_failed)
    except Exception as exc:  # the page says Redis is away instead of failing
        return {"error": f"{type(exc).__name__}: {exc}", "workers": [], "queues": [], "failed": []}


def _overview(with_failed: bool) -> dict:
    conn = get_redis()
    workers = []
    for worker in sorted(Worker.all(connection=conn), key=lambda w: w.name):
        job = worker.get_current_job()
        workers.append(
            {
                "name": worker.name,
                "hostname": worker.hostname,
                "pid": worker.pid,
                "state": worker.get_state(),
                "queues": ", ".join(worker.queue_names()),
                "job": job.description if job else "",
                "job_crawl": job.meta.get(JOB_CRAWL) if job else None,
                "successes": worker.successful_job_count,
                "failures": worker.failed_job_count,
                "birth": worker.birth_date,
                "heartbeat": worker.last_heartbeat,
            }
        )
    queues, failed = [], []
    for name in settings.RQ_QUEUES:
        queue = Queue(name, connection=conn)
        failed_registry = FailedJobRegistry(queue=queue)
        queues.append(
            {
                "name": name,
                "queued": queue.count,
                "started": StartedJobRegistry(queue=queue).count,
                "failed": failed_registry.count,
            }
        )
        if not with_failed:
            continue
        for job_id in failed_registry.get_job_ids(0, FAILED_JOBS_SHOWN - 1):
            job = queue.fetch_job(job_id)
            if job is not None:
                failed.append(_failed_job(job, name))
    return {"error": "", "workers": workers, "queues": queues, "failed": failed}


def _failed_job(job, queue_name: str) -> dict:
    result = job.latest_result()
    lines = (result.exc_string or "").strip().splitlines() if result else []
    return {
        "id": job.id,
        "queue": queue_name,
        "description": job.description,
        "ended_at": job.ended_at,
        "error": lines[-1] if lines else "",
    }


def hide_jobs(report: dict, *, shown_crawls: set[int]) -> dict:
    """The overview for someone who may see only the jobs of shown_crawls: any other worker's
    job is told as "busy", without its description (it names someone else's crawl)."""
    for worker in report["workers"]:
        if worker["job"] and worker["job_crawl"] not in shown_crawls:
            worker["job"] = "busy"
    return report


def hide_hosts(report: dict) -> dict:
    """The overview without where each worker runs (its machine's name and process id): they
    map a deployment for whoever reads them, which is staff's business only."""
    for worker in report["workers"]:
        worker["hostname"] = worker["pid"] = None
    return report
