// Starts Swagger UI on the server's own API document (a file, not inline: the page's
// Content-Security-Policy allows scripts from this origin only).
window.ui = SwaggerUIBundle({
  url: "../openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
});
