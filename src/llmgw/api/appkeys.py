"""The services routes find on the application."""

from __future__ import annotations

from aiohttp import web

from llmgw.control.catalog import CatalogService
from llmgw.control.serve_jobs import ServeJobs
from llmgw.gateway.service import Gateway

GATEWAY = web.AppKey("gateway", Gateway)
CATALOG = web.AppKey("catalog", CatalogService)
JOBS = web.AppKey("jobs", ServeJobs)
