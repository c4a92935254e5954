from django.urls import path

from . import views

app_name = "accounts"
urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("signup/done/", views.signup_done, name="signup_done"),
    path("verify/resend/", views.resend, name="resend"),
    path("verify/", views.verify, name="verify"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password/reset/", views.PasswordResetView.as_view(), name="password_reset"),
    path("password/reset/sent/", views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    # The emailed link (?u=...&t=...), then Django's .../set-password/ page.
    path("password/reset/confirm/", views.PasswordResetConfirmView.as_view(), name="password_reset_link"),
    path(
        "password/reset/<uidb64>/<token>/",
        views.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password/reset/complete/", views.PasswordResetCompleteView.as_view(), name="password_reset_complete"
    ),
]
