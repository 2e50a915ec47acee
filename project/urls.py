from django.contrib import admin
from django.urls import path

from project.api import api
from project.health import healthz
from project.metrics import metrics
from project.views import favicon, home

urlpatterns = [
    path("", home, name="home"),
    path("favicon.ico", favicon, name="favicon"),
    path("metrics", metrics, name="metrics"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
