from django.contrib import admin
from django.urls import path

from project.api import api
from project.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
