"""URL map: the UI, the REST API under /api/v1/, the OpenAPI schema, admin, metrics, health."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from kueueweb import metrics_view, views

# The admin console's sign-in counts failures like /login/ (kueueweb.throttling).
admin.site.login_form = views.RateLimitedAdminAuthenticationForm
admin.site.login = views.throttled_admin_login(admin.site.login)  # type: ignore[method-assign]

handler500 = "kueueweb.views.server_error"

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon),
    path("metrics", metrics_view.MetricsView.as_view(), name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/schema/ui/", SpectacularSwaggerView.as_view(url_name="schema"), name="schema-ui"),
    path("api/v1/", include("kueueweb.api_urls")),
    # The browser UI (the overview at "/" is named "home").
    path("", include("scheduling.web.urls")),
    path("", include("multicluster.web.urls")),
]
